package fencing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Lock's pacing. A waiter sends a grant at once when woken by a
// notification, and otherwise never sooner than MinPollInterval after its
// previous attempt.
const (
	// MinPollInterval is the shortest time Lock waits between two grant
	// attempts that no notification prompted.
	MinPollInterval = 10 * time.Millisecond
	// DefaultPollInterval is Lock's fallback poll on a backend that can
	// notify (backend.Notifier): it only covers a missed notification.
	DefaultPollInterval = time.Second
	// DefaultPollIntervalNoNotify is Lock's poll on a backend that cannot
	// notify: it bounds how late a waiter sees a release.
	DefaultPollIntervalNoNotify = 100 * time.Millisecond
)

// Lock waits until key can be granted, then holds the lease as Hold does.
//
// ctx bounds both the wait and the lease, as database/sql's BeginTx bounds
// a transaction with its context: when ctx ends, Lock gives up waiting, or
// the held lease ends (and is released). To bound only the wait, pass
// WithWaitTimeout: Lock then gives up after that long with an error wrapping
// ErrLeaseHeld, and the lease it gets before then is not bounded by it.
//
// It does not busy-poll. On a backend that implements backend.Notifier it
// subscribes to the key before its first attempt, so no release is missed,
// and tries again the moment a release (or, on etcd, an expiry) is
// announced. A refused grant tells how long the holder's lease has left
// (backend.HeldError); the waiter sleeps until then, at most the poll
// interval (WithPollInterval; DefaultPollInterval, or
// DefaultPollIntervalNoNotify on a backend that cannot notify), with jitter,
// and never less than MinPollInterval. During a lock delay (WithLockDelay)
// it sleeps the delay's time left exactly, and tries once. Many waiters on
// one key each get it in turn; tokens increase in grant order.
//
// With WithFIFO, Lock first waits in the key's line, woken when the waiter
// ahead leaves it, and tries to grant only at its head, as above: waiters
// get the key in the order their waits began (see WithFIFO).
//
// A grant whose outcome is unknown is resent with the same lease ID, so the
// lease it may have taken is adopted; if the wait ends first, or the
// backend stops answering (ErrNoAnswer, see WithRequestTimeout), Lock
// releases that lease and returns an *OutcomeError with Settled set. A
// canceled waiter leaves no subscription or goroutine behind.
func (c *Coordinator) Lock(ctx context.Context, key string, ttl time.Duration, opts ...HoldOption) (h *Held, err error) {
	cfg, err := c.holdConfig(ttl, opts)
	if err != nil {
		return nil, opError("lock", key, err)
	}
	obs := c.obs.lockBegin(ctx, key, cfg.fifo) // traces and metrics (trace.go)
	// wctx bounds the wait; the held lease lives under ctx.
	wctx := ctx
	if cfg.waitTimeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, cfg.waitTimeout, errWaitTimeout)
		defer cancel()
	}
	defer func() { c.obs.lockEnd(ctx, wctx, obs, h, err) }()
	wctx = obs.waitContext(wctx)
	w := waiter{c: c, key: key, poll: cfg.pollInterval}
	var lastHeld error // the latest refusal for a live lease
	// giveUp is Lock's error once the wait ended (or failed) with err.
	giveUp := func(err error) error {
		if lastHeld == nil && w.seen != nil {
			lastHeld = w.seen // a head of a line that saw the key held
		}
		if ctx.Err() == nil && context.Cause(wctx) == errWaitTimeout && lastHeld != nil {
			return opError("lock", key, &waitError{waited: cfg.waitTimeout, err: lastHeld})
		}
		return err
	}
	req, err := c.request(key, c.newLeaseID(), cfg.grantTimeout(ttl), []time.Duration{cfg.margin})
	if err != nil {
		return nil, opError("lock", key, err)
	}
	req.Owner, req.LockDelay = cfg.owner, cfg.lockDelay
	var ln *line // WithFIFO's entry in the key's line (fifo.go)
	if cfg.fifo {
		if ln, err = c.joinLine(wctx, key, ttl, cfg.pollInterval); err != nil {
			return nil, giveUp(opError("lock", key, err))
		}
		defer func() {
			if ln != nil { // not handed to a Held
				ln.leave(nil)
			}
		}()
		if err := ln.waitTurn(wctx); err != nil {
			if lastHeld == nil {
				lastHeld = &lineError{ahead: ln.ahead}
			}
			return nil, giveUp(opError("lock", key, err))
		}
	}
	if err := w.subscribe(wctx); err != nil {
		return nil, giveUp(opError("lock", key, err))
	}
	defer w.close()
	if cfg.fifo {
		// At the head, the waiter that went before may still hold the
		// key (it left the line when it got it): look, and wait for its
		// release, so that the one grant attempt finds the key free.
		if err := w.awaitFree(wctx); err != nil {
			return nil, giveUp(opError("lock", key, err))
		}
	}

	var unknownSince time.Time // first send of req.LeaseID whose outcome is unknown
	for {
		sent := time.Now()
		lease, err := c.send(wctx, "grant", req, unknownSince, c.backend.Grant)
		var held *backend.HeldError
		var oe *OutcomeError
		switch {
		case err == nil:
			h := c.startHeld(ctx, lease, ttl, cfg)
			if ln != nil {
				ln.handTo(h)
				ln = nil
			}
			return h, nil
		case errors.As(err, &held):
			// Another lease is live, so no earlier attempt of ours holds
			// the key (its ID would have been answered with its lease).
			lastHeld = held
			unknownSince, req.LeaseID = time.Time{}, c.newLeaseID()
			wait := w.waitHeld
			if _, ok := c.backend.(backend.Inspector); ok && cfg.fifo {
				wait = func(ctx context.Context, _ *backend.HeldError) error { return w.awaitFree(ctx) }
			}
			if err := wait(wctx, held); err != nil {
				return nil, giveUp(opError("lock", key, err))
			}
		case errors.As(err, &oe) && wctx.Err() == nil && !errors.Is(err, ErrNoAnswer):
			// Adopt: resend with the same ID. Should that attempt take
			// the lease, its Deadline counts from this first send.
			if unknownSince.IsZero() {
				unknownSince = sent
			}
			if err := w.pause(wctx); err != nil {
				return nil, c.lockEnded(ctx, opError("lock", key, err), req, unknownSince, ttl)
			}
		case errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseNotFound):
			// Only an attempt with this ID that took effect (its answer
			// lost, within send's resends or an earlier round) can be
			// answered so: that lease has ended since. Start afresh.
			unknownSince, req.LeaseID = time.Time{}, c.newLeaseID()
			if err := w.pause(wctx); err != nil {
				return nil, giveUp(opError("lock", key, err))
			}
		case unknownSince.IsZero() && oe == nil:
			return nil, giveUp(err)
		default:
			return nil, c.lockEnded(ctx, err, req, unknownSince, ttl)
		}
	}
}

// errWaitTimeout is the cause of Lock's wait context when WithWaitTimeout
// ended it.
var errWaitTimeout = errors.New("wait timeout")

// waitError is Lock's error when WithWaitTimeout ended the wait: it wraps
// the last refusal, a *backend.HeldError.
type waitError struct {
	waited time.Duration
	err    error
}

func (e *waitError) Error() string {
	return "gave up after waiting " + e.waited.String() + ": " + e.err.Error()
}

func (e *waitError) Unwrap() error { return e.err }

// lockEnded returns Lock's error once it gives up, first releasing the lease
// an attempt with an unknown outcome may have taken.
func (c *Coordinator) lockEnded(ctx context.Context, err error, req backend.Request, unknownSince time.Time, ttl time.Duration) error {
	var oe *OutcomeError
	isOutcome := errors.As(err, &oe)
	if unknownSince.IsZero() && !isOutcome {
		return err // no attempt of ours may hold the key
	}
	if !isOutcome {
		oe = &OutcomeError{Op: "grant", Key: req.Key, LeaseID: req.LeaseID, Err: &unsettledError{last: err}}
	}
	return c.settle(ctx, oe, ttl)
}

// unsettledError is the Err of Lock's *OutcomeError when Lock gave up on
// an attempt's error (one never sent, a wait that ended) after an earlier
// attempt's outcome stayed unknown: the outcome is that earlier one's,
// unknown, and the later error, named by its innermost cause (the key is
// the OutcomeError's to name), is why it was not settled.
type unsettledError struct{ last error }

func (e *unsettledError) Error() string {
	cause := e.last
	for u := errors.Unwrap(cause); u != nil; u = errors.Unwrap(cause) {
		cause = u
	}
	return ErrOutcomeUnknown.Error() + ": an earlier attempt may have taken the lease, and Lock gave up on the next: " + cause.Error()
}

func (e *unsettledError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.last} }

// waiter is one Lock call's way of waiting for its key.
type waiter struct {
	c     *Coordinator
	key   string
	poll  time.Duration
	sub   backend.Subscription
	freed <-chan struct{}
	last  time.Time          // when the previous grant attempt was let through
	seen  *backend.HeldError // what awaitFree last saw of a live lease or a lock delay (fifo.go)
}

// subscribe sets up the notification, when the backend has one.
func (w *waiter) subscribe(ctx context.Context) error {
	n, ok := w.c.backend.(backend.Notifier)
	if ok {
		sub, err := attempt(w.c, ctx, func(ctx context.Context) (backend.Subscription, error) { return n.NotifyFree(ctx, w.key) })
		if err != nil {
			return err
		}
		w.sub, w.freed = sub, sub.Freed()
	}
	if w.poll == 0 {
		w.poll = DefaultPollInterval
		if w.sub == nil {
			w.poll = DefaultPollIntervalNoNotify
		}
	}
	w.last = time.Now()
	return nil
}

func (w *waiter) close() {
	if w.sub != nil {
		w.sub.Close()
	}
}

// wait blocks until a notification, or until the holder's lease should have
// ended (remaining, when known), or the poll interval, whichever is first.
func (w *waiter) wait(ctx context.Context, remaining time.Duration) error {
	d := w.poll
	if remaining > 0 && remaining < d {
		d = remaining + rand.N(min(remaining/10, 10*time.Millisecond)+1)
	} else {
		d = d/2 + rand.N(d/2+1)
	}
	d = max(d, MinPollInterval-time.Since(w.last))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case _, ok := <-w.freed:
		if !ok { // the watch broke: poll from now on
			w.freed = nil
			w.poll = min(w.poll, DefaultPollIntervalNoNotify)
		}
	case <-t.C:
	}
	w.last = time.Now()
	return nil
}

// pause waits a short jittered while before an ambiguous grant is resent.
func (w *waiter) pause(ctx context.Context) error {
	d := MinPollInterval + rand.N(MinPollInterval)
	if err := sleep(ctx, d); err != nil {
		return err
	}
	w.last = time.Now()
	return nil
}

// WithPollInterval bounds how long Lock waits between grant attempts when
// nothing wakes it: the fallback for a missed notification, and the poll of
// a backend that cannot notify (see Lock). It must be at least
// MinPollInterval.
func WithPollInterval(d time.Duration) HoldOption {
	return func(c *holdConfig) error {
		if d < MinPollInterval {
			return fmt.Errorf("%w: poll interval %v is below the minimum %v", ErrInvalidOption, d, MinPollInterval)
		}
		c.pollInterval = d
		return nil
	}
}

// WithWaitTimeout makes Lock give up waiting for the key after d, with an
// error wrapping ErrLeaseHeld that says how long it waited. It bounds only
// the wait: the lease Lock gets within d is held until its Release, its
// loss or the end of Lock's context, however long after d that is. d must
// be positive. Hold and Do, which do not wait, ignore it.
func WithWaitTimeout(d time.Duration) HoldOption {
	return func(c *holdConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: wait timeout %v is not positive", ErrInvalidOption, d)
		}
		c.waitTimeout = d
		return nil
	}
}
