package fencing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/tokenctx"
)

// WithMargin sets the coordinator's margin for the held lease (default the
// Coordinator's default margin).
func WithMargin(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: %w: %v is negative", ErrInvalidOption, ErrInvalidMargin, d)
		}
		c.margin, c.marginSet = d, true
		return nil
	})
}

// WithOwner sets the held lease's owner, in place of the Coordinator's
// WithDefaultOwner: a public label such as "host-3/pid 4711" or a leader's
// address, stored with the lease in its grant's atomic step, kept across
// renewals and reported by Inspect and List (KeyState.Owner) while the lease
// is live. It is never a credential. An owner that backend.CheckOwner
// refuses (longer than backend.MaxOwnerLength bytes, not UTF-8, with a
// control character) gets an error wrapping ErrInvalidOption and
// ErrInvalidOwner, before any request.
func WithOwner(owner string) HoldOption {
	return holdOption(func(c *holdConfig) error {
		if err := backend.CheckOwner(owner); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		c.owner, c.grantOnly = owner, "WithOwner"
		return nil
	})
}

// WithRenewInterval sets how long after each confirmed grant or renewal was
// sent the next renewal starts (default a third of the TTL). It must be
// positive and shorter than the TTL; the shorter it is, the more attempts a
// renewal has before the Deadline.
func WithRenewInterval(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: renew interval %v is not positive", ErrInvalidOption, d)
		}
		c.interval = d
		return nil
	})
}

// WithWarning makes Held.Warning receive the lease when less than d remains
// before its Deadline without a newer confirmed renewal: a last chance for
// work that would rather stop early than be cut off. d must not be negative,
// and zero (the default) sends no warnings.
func WithWarning(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: warning duration %v is negative", ErrInvalidOption, d)
		}
		c.warnBefore = d
		return nil
	})
}

// Held is a lease kept alive in the background by Hold or Lock until its
// holder releases it or it is lost. Its Context ends at the earliest of: a
// renewal the coordinator rejects; the Deadline of the last confirmed grant
// or renewal passing without a newer confirmation (counted, like
// Lease.Deadline, from when that request was sent); the maximum hold
// (WithMaxHold) being reached; the parent context ending; Release. Work done
// under the lease runs under Context and stops by itself.
//
// The Deadline is read on the monotonic clock each time the Context's Err,
// Done or Value, or Held's Err, Done or Release, is called: past it, they
// report the loss even when the timer that ends the lease has yet to run (a
// process frozen past the Deadline, a starved timer goroutine). A context
// derived from Context ends when that timer runs or one of these is called.
//
// A Held is safe for concurrent use. Call Release when done, even after the
// lease was lost: it stops the renewal and frees the key early.
type Held struct {
	c      *Coordinator
	key    string
	ttl    time.Duration
	cfg    holdConfig
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the renewer has returned
	warn   chan Lease

	mu       sync.Mutex
	lease    Lease
	err      error       // why the lease ended early; nil while held and after Release
	ended    bool        // no renewal will be confirmed any more
	lastErr  error       // the latest failed renewal attempt's error
	expiry   *time.Timer // ends the lease at its Deadline
	warning  *time.Timer // sends on warn before the Deadline; nil without WithWarning
	max      holdCap     // WithMaxHold's cap (maxhold.go)
	line     *line       // WithFIFO's entry in the key's line (fifo.go); nil without
	released sync.Once
	relErr   error

	span   tspan     // SpanHeld (trace.go)
	since  time.Time // when the lease was got, for MetricHeldDuration
	closed bool      // span ended and held duration recorded; guarded by mu

	// until is how checkDeadlineLocked reads the time left before the
	// Deadline: time.Until, or a test's clock moved past the Deadline
	// while the timers run on the real one (export_test.go); guarded by mu.
	until func(time.Time) time.Duration
}

// errReleased is the Context's cause after Release.
var errReleased = errors.New("lease released by its holder")

// Hold takes a lease on key for ttl, as Grant does (ErrLeaseHeld when the
// key is held), and keeps it renewed in the background until Release, the
// parent context ending, or its loss. The renewal starts a third of the TTL
// after the grant was sent (WithRenewInterval), retries transient errors with
// jittered backoff while the Deadline allows, and resends an ambiguous
// renewal with the same lease ID.
//
// When the grant's outcome stays unknown, Hold releases the lease it may
// have taken before returning the *OutcomeError (with Settled set), so the
// caller is never locked out by its own lease; if that release fails too,
// the error carries the lease ID for the caller to settle.
func (c *Coordinator) Hold(ctx context.Context, key string, ttl time.Duration, opts ...HoldOption) (*Held, error) {
	cfg, err := c.holdConfig(ttl, opts)
	if err != nil {
		return nil, opError("hold", key, err)
	}
	req, err := c.request(key, c.newLeaseID(), cfg.grantTimeout(ttl), []time.Duration{cfg.margin})
	if err != nil {
		return nil, opError("hold", key, err)
	}
	req.Owner, req.LockDelay = cfg.owner, cfg.lockDelay
	lease, err := c.send(ctx, opGrant, req, time.Time{})
	if err != nil {
		return nil, c.settle(ctx, err, ttl)
	}
	return c.startHeld(ctx, lease, ttl, cfg), nil
}

// settle releases the lease a grant with an unknown outcome may have taken,
// and returns the error to report: the *OutcomeError, marked Settled when
// the release came through. Any other error is returned as it is.
func (c *Coordinator) settle(ctx context.Context, err error, ttl time.Duration) error {
	var oe *OutcomeError
	if !errors.As(err, &oe) || oe.Op != "grant" {
		return err
	}
	// After ttl (plus the margin) the lease has expired anyway. A server
	// that did not answer the grant gets one request timeout for the
	// release, not a round of resends.
	bound := ttl
	if c.reqTimeout > 0 && errors.Is(err, ErrNoAnswer) {
		bound = min(bound, c.reqTimeout)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	keys := oe.Keys
	if keys == nil {
		keys = []string{oe.Key}
	}
	oe.Settled = true
	for _, key := range keys {
		rerr := c.Release(rctx, key, oe.LeaseID)
		oe.Settled = oe.Settled && (rerr == nil || errors.Is(rerr, ErrLeaseNotFound) || errors.Is(rerr, ErrLeaseExpired))
	}
	return oe
}

func (c *Coordinator) startHeld(parent context.Context, lease Lease, ttl time.Duration, cfg holdConfig) *Held {
	sctx, span := c.obs.heldSpan(parent, lease, cfg.owner)
	ctx, cancel := context.WithCancelCause(sctx)
	h := &Held{c: c, key: lease.Key, ttl: ttl, cfg: cfg, cancel: cancel, done: make(chan struct{}), lease: lease, max: newHoldCap(lease, ttl, cfg),
		span: span, since: time.Now(), until: time.Until}
	h.ctx = heldContext{Context: ctx, h: h}
	h.mu.Lock()
	h.expiry = time.AfterFunc(time.Until(lease.Deadline), h.expire)
	if cfg.warnBefore > 0 {
		h.warn = cfg.warnTo
		if h.warn == nil {
			h.warn = make(chan Lease, 1)
		}
		h.warning = time.AfterFunc(time.Until(lease.Deadline.Add(-cfg.warnBefore)), h.sendWarning)
	}
	h.mu.Unlock()
	go h.renew(parent)
	return h
}

// Lease returns the lease as of the latest confirmed grant or renewal: its
// Deadline moves on with each one.
func (h *Held) Lease() Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// Token returns the lease's fencing token; renewals keep it.
func (h *Held) Token() uint64 { return h.Lease().Token }

// Context returns a context that ends when the lease does (see Held). Its
// cause (context.Cause) says why: an error wrapping ErrLeaseLost after a
// loss, the parent's cause, or the holder's release. It carries the lease's
// key and token (guard.TokenFromContext), for the carriers in guard/httpguard and
// guard/grpcguard to send to the service that writes.
func (h *Held) Context() context.Context { return h.ctx }

// heldContext is a held lease's context: its Deadline is the lease's
// current Deadline, which moves on with each confirmed renewal (so a gRPC or
// database call under it is bounded by the lease). Cancellation is the
// embedded context's: the expiry timer, a rejected renewal, the parent, or
// Release cancel it. Err, Done and Value first end the lease if its
// Deadline has passed on the monotonic clock, so a holder that runs again
// before the expiry timer does (a process frozen past the Deadline, a
// starved timer) never sees the lease live.
type heldContext struct {
	context.Context
	h *Held
}

// Err is the embedded context's, once the Deadline has been checked.
func (c heldContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	c.h.checkDeadline()
	return c.Context.Err()
}

// Done is the embedded context's, once the Deadline has been checked.
func (c heldContext) Done() <-chan struct{} {
	if c.Context.Err() == nil {
		c.h.checkDeadline()
	}
	return c.Context.Done()
}

func (c heldContext) Deadline() (time.Time, bool) {
	d := c.h.Lease().Deadline
	if pd, ok := c.Context.Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

// Value carries the lease's key and token (see guard.TokenFromContext).
// Any other key is looked up once the Deadline has been checked (so that
// context.Cause reports a loss the expiry timer has yet to report).
func (c heldContext) Value(k any) any {
	if tokenctx.IsKey(k) {
		return tokenctx.Value(c.h.key, c.h.Token())
	}
	if c.Context.Err() == nil {
		c.h.checkDeadline()
	}
	return c.Context.Value(k)
}

// Done is Context().Done().
func (h *Held) Done() <-chan struct{} { return h.ctx.Done() }

// Err returns nil while the lease is held and after its holder's Release;
// an error wrapping ErrLeaseLost and the reason after a loss; and the parent
// context's cause when that ended first.
func (h *Held) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkDeadlineLocked()
	if inner := h.ctx.(heldContext).Context; h.err == nil && !h.ended && inner.Err() != nil {
		return context.Cause(inner) // the parent ended; the renewer has yet to see it
	}
	return h.err
}

// Warning receives the lease when less than the WithWarning duration
// remains before its Deadline without a newer confirmed renewal. It is nil
// (never ready) without WithWarning. It has room for one value; a warning
// that finds it full is dropped.
func (h *Held) Warning() <-chan Lease { return h.warn }

// Release stops the renewal and releases exactly this lease. It returns nil
// when the lease was held until now; after a loss it still releases (to free
// the key early, if the coordinator still counts the lease) and returns
// Err(). A release that reaches the coordinator after the Deadline passed
// (the lease expired while it was on its way) is such a loss too: its error
// wraps ErrLeaseLost. Calling it again returns the same result. No goroutine
// of the Held outlives Release.
func (h *Held) Release(ctx context.Context) error {
	h.released.Do(func() {
		h.mu.Lock()
		h.checkDeadlineLocked() // a lease past its Deadline was lost, not held until now
		h.ended = true
		h.stopTimers()
		h.max.holderReleases() // the holder releases it: no release at the cap
		lost, lease := h.err, h.lease
		if lost == nil {
			h.closeLocked("released")
		}
		h.mu.Unlock()
		h.cancel(errReleased) // ends an in-flight renewal too
		// Free the key first, then wait for the renewer: a renewal that
		// still reaches the store after the release is refused, and its
		// answer is ignored (the lease has ended).
		err := h.c.Release(ctx, h.key, lease.ID)
		if lost == nil && (errors.Is(err, ErrLeaseNotFound) || errors.Is(err, ErrLeaseExpired)) {
			// The store ends a lease no sooner than its Deadline and the
			// margin: one that it no longer counts when the release
			// reaches it was not held until now. The Deadline passed while
			// the release was on its way (a process or a store stalled
			// for longer than the lease had left): report the loss, as
			// the expiry timer would have, not a bare refusal. (Before the
			// Deadline such an answer is the store's fault, and is
			// returned as it came.)
			h.mu.Lock()
			if h.until(lease.Deadline) <= 0 {
				lost = fmt.Errorf("%w: %w before the release reached the store (%w)", ErrLeaseLost, errDeadlinePassed, err)
				h.err = lost
			}
			h.mu.Unlock()
		}
		<-h.done
		if h.line != nil {
			h.line.leave(ctx) // after the release: the next waiter wakes to a free key
		}
		if lost != nil {
			err = lost
		}
		h.relErr = err
	})
	return h.relErr
}

// stopTimers stops the expiry and warning timers; h.mu is held.
func (h *Held) stopTimers() {
	h.expiry.Stop()
	if h.warning != nil {
		h.warning.Stop()
	}
}

// lose ends the lease with err unless it has ended already.
func (h *Held) lose(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loseLocked(err)
}

func (h *Held) loseLocked(err error) {
	if h.ended {
		return
	}
	h.ended = true
	h.err = err
	h.stopTimers()
	h.cancel(err)
	h.c.obs.leaseLost(h.key, h.lease.Token, err)
	h.closeLocked(lostReasonNames[lostReasonOf(err)])
}

// closeLocked ends the lease's span and records how long it was held, once;
// h.mu is held.
func (h *Held) closeLocked(end string) {
	if h.closed {
		return
	}
	h.closed = true
	h.c.obs.heldEnd(h.span, h.since, end)
}

// expire runs when the Deadline of the last confirmed request passes.
// A renewal confirmed while the timer fired has moved the Deadline on (and
// reset the timer): then the lease goes on.
func (h *Held) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkDeadlineLocked()
}

// checkDeadline ends the lease, as its expiry timer does, when its Deadline
// has passed on the monotonic clock, whether or not that timer has run.
func (h *Held) checkDeadline() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkDeadlineLocked()
}

func (h *Held) checkDeadlineLocked() {
	if h.ended || h.until(h.lease.Deadline) > 0 {
		return
	}
	if h.max.reached {
		h.loseLocked(h.max.err(h.cfg.maxHold))
		return
	}
	if h.lastErr != nil {
		h.loseLocked(fmt.Errorf("%w: %w without a confirmed renewal (last attempt: %w)", ErrLeaseLost, errDeadlinePassed, h.lastErr))
		return
	}
	h.loseLocked(fmt.Errorf("%w: %w without a confirmed renewal", ErrLeaseLost, errDeadlinePassed))
}

func (h *Held) sendWarning() {
	select {
	case h.warn <- h.Lease():
	default:
	}
}

// confirm records a confirmed renewal, unless the lease ended meanwhile (a
// renewal confirmed after the Deadline passed cannot undo the loss).
func (h *Held) confirm(l Lease) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.checkDeadlineLocked(); h.ended {
		return false
	}
	l = h.max.clamp(l)
	h.lease, h.lastErr = l, nil
	h.expiry.Reset(time.Until(l.Deadline))
	if h.warning != nil {
		h.warning.Reset(time.Until(l.Deadline.Add(-h.cfg.warnBefore)))
	}
	return true
}

// renew is the renewer goroutine.
func (h *Held) renew(parent context.Context) {
	defer close(h.done)
	for {
		lease := h.Lease()
		if h.maxReached() {
			h.endAtMaxHold(parent)
			return
		}
		sentAt := lease.Deadline.Add(-h.ttl)
		if sleep(h.ctx, time.Until(sentAt.Add(h.cfg.interval))) != nil {
			h.afterEnd(parent, lease)
			return
		}
		if !h.renewOnce(lease) {
			h.afterEnd(parent, lease)
			return
		}
	}
}

// renewOnce renews lease, retrying transient errors with jittered backoff
// while its Deadline allows. It reports whether the lease goes on.
func (h *Held) renewOnce(lease Lease) bool {
	backoff := min(h.cfg.interval/8, 100*time.Millisecond)
	for {
		if lease.Remaining() <= 0 {
			<-h.ctx.Done() // the expiry timer ends the lease
			return false
		}
		timeout, ok := h.renewTimeout(lease)
		if !ok {
			return true // the maximum hold leaves nothing to renew for
		}
		// No attempt outlives the Deadline it could save; one cut off by
		// it got no answer in time (ErrNoAnswer).
		ctx, cancel := context.WithDeadlineCause(h.ctx, lease.Deadline, errNoAnswerCause)
		next, err := h.c.Renew(ctx, h.key, lease.ID, timeout, h.cfg.margin)
		cancel()
		switch {
		case err == nil:
			return h.confirm(next)
		case h.ctx.Err() != nil:
			return false
		case errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseNotFound):
			h.lose(fmt.Errorf("%w: %w", ErrLeaseLost, err))
			return false
		}
		h.mu.Lock()
		h.lastErr = err
		h.mu.Unlock()
		wait := backoff/2 + rand.N(backoff/2+1)
		if sleep(h.ctx, min(wait, lease.Remaining())) != nil {
			return false
		}
		backoff = min(backoff*2, max(h.cfg.interval/2, time.Millisecond))
	}
}

// afterEnd runs when the lease's context has ended. When the parent context
// ended it, the holder gave the lease up: release it so the key frees now,
// and report the parent's cause from Err.
func (h *Held) afterEnd(parent context.Context, lease Lease) {
	if parent.Err() == nil {
		return // released or lost
	}
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	h.err = context.Cause(parent)
	h.stopTimers()
	h.closeLocked("canceled")
	h.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.WithoutCancel(parent), lease.Deadline)
	defer cancel()
	_ = h.c.Release(ctx, h.key, lease.ID) // best effort: the lease expires anyway
}

// maxReached reports whether the cap leaves nothing to renew.
func (h *Held) maxReached() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max.reached
}

// renewTimeout returns the timeout the next renewal attempt of lease asks
// for: the TTL, or the time left before the cap when that is shorter. It
// reports false, and marks the cap reached, when that time is too short to
// renew for (below backend.MinTimeout, or no later than lease's Deadline).
func (h *Held) renewTimeout(lease Lease) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.max.end.IsZero() {
		return h.ttl, true
	}
	left := time.Until(h.max.end)
	if left < backend.MinTimeout || !h.max.end.After(lease.Deadline) {
		h.max.reached = true
		return 0, false
	}
	return min(h.ttl, left), true
}

// endAtMaxHold is the renewer's end once the cap leaves nothing to renew:
// it waits for the lease's context to end (the expiry timer ends it at the
// last Deadline with the cap's error), then releases the lease at once.
// When something else ended the lease first, it ends as the renewer
// always does (afterEnd).
func (h *Held) endAtMaxHold(parent context.Context) {
	<-h.ctx.Done()
	h.mu.Lock()
	capped, lease := errors.Is(h.err, ErrMaxHold) && !h.max.holderReleased, h.lease
	if !capped {
		h.mu.Unlock()
		h.afterEnd(parent, lease)
		return
	}
	// The coordinator keeps the lease at most a TTL and the margin longer:
	// a release that takes longer is moot. The holder's Release, bounded
	// by its own context, cuts it short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), h.ttl)
	defer cancel()
	h.max.releasing = cancel
	h.mu.Unlock()
	_ = h.c.Release(ctx, h.key, lease.ID) // logged and counted by Release; the lease expires anyway
}

// Do runs fn under a lease on key held with Hold: fn's context is the held
// lease's Context, which ends if the lease is lost. fn must pass
// lease.Token to every write it makes to the protected resource. Do
// releases the lease when fn returns, and returns the error of the grant,
// or fn's error, or, when fn succeeded, the error of the release. When the
// lease was lost while fn ran, the error wraps ErrLeaseLost (with its
// reason) whatever fn returned, and fn's error too: a fn that returns
// ctx.Err() after the loss gets an error for which both errors.Is(err,
// ErrLeaseLost) and errors.Is(err, context.Canceled) hold.
func (c *Coordinator) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, lease Lease) error, opts ...HoldOption) error {
	h, err := c.Hold(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	fnErr := fn(h.Context(), h.Lease())
	// Release even when ctx is done: the lease would otherwise block the key
	// until it expires.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	relErr := h.Release(rctx)
	switch {
	case fnErr == nil:
		return relErr
	case errors.Is(relErr, ErrLeaseLost) && !errors.Is(fnErr, ErrLeaseLost):
		return &lostUnderFnError{lost: relErr, fn: fnErr}
	}
	return fnErr
}

// lostUnderFnError is Do's error when the lease was lost while fn ran and
// fn returned an error of its own.
type lostUnderFnError struct{ lost, fn error }

func (e *lostUnderFnError) Error() string {
	return e.lost.Error() + "; fn returned: " + e.fn.Error()
}

func (e *lostUnderFnError) Unwrap() []error { return []error{e.lost, e.fn} }
