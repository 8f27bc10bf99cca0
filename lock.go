package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing/backend"
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
// A store that is away for a while (a refused dial, a reset, a restart, a
// failover, no answer within the request timeout: see IsTransient) is one
// more reason to wait, not a reason to give up: Lock tries again after a
// jittered pause that doubles up to a second, and polls when it cannot
// subscribe, until the wait ends. Its error then wraps both the wait's end
// (ctx's error; context.DeadlineExceeded for WithWaitTimeout) and the
// store's last error. An error that no wait cures (a closed backend, an
// invalid argument, refused credentials) ends the wait at once.
//
// A grant whose outcome is unknown is resent with the same lease ID, so the
// lease it may have taken is adopted (while its Deadline, counted from
// that first send, has not passed); if the wait ends first, Lock releases
// that lease and returns an *OutcomeError with Settled set. A canceled
// waiter leaves no subscription or goroutine behind.
func (c *Coordinator) Lock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (h *Held, err error) {
	l, err := c.newLockCall(ctx, key, nil, ttl, opts)
	if err != nil {
		return nil, opError("lock", key, err)
	}
	l.observe()
	defer func() {
		var token uint64
		if h != nil {
			token = h.Token()
		}
		l.observeEnd(token, err)
	}()
	defer l.close()
	leases, err := l.wait()
	if err != nil {
		return nil, err
	}
	return l.hold(leases[0]), nil
}

// LockMany waits until keys can be granted together, then holds the leases
// as HoldMany does. It waits as Lock does (notifications, the refused
// grant's time left, the poll interval, WithWaitTimeout), for whichever key
// refused the latest attempt, and tries every key again each time: it
// never holds some keys while it waits for others, so waiters that take
// overlapping sets in any order cannot deadlock. Its options are Lock's;
// its wait is traced and measured as Lock's, under the first key.
//
// With WithFIFO it waits in the line of each key in turn, in key order
// (byte order): it joins the first key's line, waits to reach its head,
// then joins the next key's line, and so on; at the head of every line it
// waits for the keys to be free and grants them all at once. Heads are
// taken in one global order, so no two waiters each wait for a head the
// other has (no deadlock), and each line serves its waiters first come,
// first served (no starvation among waiters in the lines). A waiter at the
// head of a key's line holds up that line while it waits in the next ones,
// as a waiter holding an ordered lock would. Without WithFIFO a many-key
// waiter can be overtaken on any of its keys by grants of fewer keys.
//
// When the outcome of a grant stays unknown, LockMany releases every lease
// it may have taken, as Lock does for one.
func (c *Coordinator) LockMany(ctx context.Context, keys []string, ttl time.Duration, opts ...LockOption) (m *HeldMany, err error) {
	l, err := c.newLockCall(ctx, "", keys, ttl, opts)
	if err != nil {
		return nil, manyError("lock", keys, err)
	}
	defer l.close()
	if _, ok := c.backend.(backend.MultiGranter); !ok {
		return nil, manyError("lock", keys, errNoMultiGrant)
	}
	if err := backend.CheckMany(manyKeyReqs(keys)); err != nil {
		return nil, manyError("lock", keys, err)
	}
	l.observe() // under the first key
	defer func() {
		var token uint64
		if m != nil {
			token = m.held[0].Token()
		}
		l.observeEnd(token, err)
	}()
	leases, err := l.wait()
	if err != nil {
		return nil, err
	}
	return l.holdMany(leases), nil
}

// lockCall is one Lock call, or one LockMany call. Its phases, in order:
// newLockCall checks the options and builds the grant request; observe
// starts the wait's traces and metrics; wait runs queue, which waits in the
// key's line (WithFIFO), watch, which subscribes to the key's releases, and
// grant, which sends the request until it succeeds, waiting between
// attempts as each refusal tells (next). hold starts the Held. giveUp and
// stop make Lock's error when it stops short; observeEnd records the end.
//
// A LockMany's lockCall is its first key's, and has a member per key (the
// first is itself), each with that key's line and subscription: queue and
// watch run each member's, in key order, and grant grants every key at
// once, waiting on the member of the key that refused.
type lockCall struct {
	c      *Coordinator
	ctx    context.Context // bounds the call and the held lease
	wctx   context.Context // bounds the wait: ctx, or WithWaitTimeout's
	cancel context.CancelFunc
	key    string
	ttl    time.Duration
	cfg    lockConfig
	req    backend.Request
	w      keyWaiter
	ln     *line    // WithFIFO's entry in the key's line (fifo.go), until a Held has it
	obs    *lockObs // the wait's traces and metrics (trace.go)

	lastHeld     error     // the latest refusal for a live lease
	lastErr      error     // the store's latest transient error (IsTransient), nil once it answers
	away         backoff   // paces the attempts while the store is away
	unknownSince time.Time // first send of req.LeaseID whose outcome is unknown

	keys    []string    // LockMany's keys; nil for Lock
	members []*lockCall // LockMany's: one per key, in the order of keys
}

// newLockCall checks the options and builds the grant request of a Lock
// on key, or of a LockMany on keys (its call is the first key's, with every
// key). Its error does not name the key: the caller names its key, or keys.
func (c *Coordinator) newLockCall(ctx context.Context, key string, keys []string, ttl time.Duration, opts []LockOption) (*lockCall, error) {
	if len(keys) > 0 {
		key = keys[0]
	}
	cfg, err := c.lockConfig(ttl, opts)
	if err != nil {
		return nil, err
	}
	req, err := c.request(key, c.newLeaseID(), cfg.grantTimeout(ttl), []time.Duration{cfg.margin})
	if err != nil {
		return nil, err
	}
	req.Owner, req.LockDelay = cfg.owner, cfg.lockDelay
	l := &lockCall{c: c, ctx: ctx, wctx: ctx, cancel: func() {}, key: key, keys: keys, ttl: ttl, cfg: cfg, req: req}
	if cfg.waitTimeout > 0 {
		l.wctx, l.cancel = context.WithTimeoutCause(ctx, cfg.waitTimeout, errWaitTimeout)
	}
	l.w = keyWaiter{c: c, key: key, poll: cfg.pollInterval}
	return l, nil
}

// observe starts recording the wait (trace.go): its span, which the wait's
// context then carries, and its metrics, under the call's key (a
// LockMany's first).
func (l *lockCall) observe() {
	l.obs = l.c.obs.lockBegin(l.ctx, l.key, l.cfg.fifo)
	l.wctx = l.obs.waitContext(l.wctx)
}

// observeEnd records the end of the wait: the call got the lease of token
// (a LockMany's first), or gave up with err.
func (l *lockCall) observeEnd(token uint64, err error) {
	l.c.obs.lockEnd(l.ctx, l.obs, token, l.timedOut(), err)
}

// wait waits for the key (every key of a LockMany) and grants it: queue,
// watch, then grant.
func (l *lockCall) wait() ([]Lease, error) {
	if err := l.queue(); err != nil {
		return nil, err
	}
	if err := l.watch(); err != nil {
		return nil, err
	}
	return l.grant()
}

// timedOut reports whether WithWaitTimeout ended the wait (and not the
// call's context).
func (l *lockCall) timedOut() bool {
	return l.ctx.Err() == nil && context.Cause(l.wctx) == errWaitTimeout
}

// close ends what the call started and no Held took over: the
// subscriptions, the entries in the lines, the wait's timer.
func (l *lockCall) close() {
	for _, m := range l.members[min(1, len(l.members)):] { // the first is l
		m.close()
	}
	l.w.close()
	if l.ln != nil {
		l.ln.leave(nil)
	}
	l.cancel()
}

// queue, with WithFIFO, joins the key's line and waits to reach its head.
// A LockMany's joins every key's line, one after another in key order, and
// subscribes to each key once at its head (see LockMany).
func (l *lockCall) queue() error {
	if l.keys != nil {
		l.members = make([]*lockCall, len(l.keys))
		for i, k := range l.keys {
			l.members[i] = l
			if i > 0 {
				l.members[i] = &lockCall{c: l.c, ctx: l.ctx, wctx: l.wctx, cancel: func() {}, key: k, ttl: l.ttl, cfg: l.cfg,
					w: keyWaiter{c: l.c, key: k, poll: l.cfg.pollInterval}}
			}
		}
		for _, i := range backend.KeyOrder(manyKeyReqs(l.keys)) {
			m := l.members[i]
			if err := m.queueKey(); err != nil {
				return m.giveUp(err)
			}
			if err := m.subscribe(); err != nil {
				return m.giveUp(err)
			}
		}
		return nil
	}
	if err := l.queueKey(); err != nil {
		return l.giveUp(err)
	}
	return nil
}

// queueKey is queue on the call's one key.
func (l *lockCall) queueKey() error {
	if !l.cfg.fifo {
		return nil
	}
	for {
		ln, err := l.c.joinLine(l.wctx, l.key, l.ttl, l.cfg.pollInterval)
		if err == nil {
			l.ln = ln
			break
		}
		if !l.storeAway(err) {
			return opError("lock", l.key, err)
		}
		if err := l.away.wait(l.wctx); err != nil {
			return opError("lock", l.key, err)
		}
	}
	l.away.reset()
	if err := l.ln.waitTurn(l.wctx); err != nil {
		if l.ln.lastErr != nil {
			l.lastErr = l.ln.lastErr
		} else if l.lastHeld == nil {
			l.lastHeld = &lineError{ahead: l.ln.ahead}
		}
		return opError("lock", l.key, err)
	}
	l.lastErr = nil
	return nil
}

// watch subscribes to the key's releases before the first grant attempt, so
// that none is missed. At the head of a line, the waiter that went before
// may still hold the key (it left the line when it got it): watch then
// waits for its release, so that the one grant attempt finds the key free.
// A LockMany's has subscribed to every key in queue, and waits at the head
// of every line in key order.
func (l *lockCall) watch() error {
	if l.keys == nil {
		if err := l.subscribe(); err != nil {
			return l.giveUp(err)
		}
		if err := l.awaitHead(); err != nil {
			return l.giveUp(err)
		}
		return nil
	}
	for _, i := range backend.KeyOrder(manyKeyReqs(l.keys)) {
		m := l.members[i]
		if err := m.awaitHead(); err != nil {
			return m.giveUp(err)
		}
	}
	return nil
}

// subscribe subscribes to the key's releases. While the store is away
// (IsTransient), the waiter polls instead (see keyWaiter.subscribe).
func (l *lockCall) subscribe() error {
	if err := l.w.subscribe(l.wctx); err != nil {
		return opError("lock", l.key, err)
	}
	if l.w.unsubscribed != nil {
		l.lastErr = l.w.unsubscribed
	}
	return nil
}

// awaitHead, with WithFIFO, waits for the release of the key by the waiter
// that went before.
func (l *lockCall) awaitHead() error {
	if l.cfg.fifo {
		if err := l.w.awaitFree(l.wctx); err != nil {
			return opError("lock", l.key, err)
		}
	}
	return nil
}

// grant sends the grant request until a lease is granted (one per key for
// a LockMany) or the call ends.
func (l *lockCall) grant() ([]Lease, error) {
	for {
		sent := time.Now()
		leases, err := l.send()
		if err == nil {
			return leases, nil
		}
		if err := l.next(err, sent); err != nil {
			return nil, err
		}
	}
}

// send sends the grant request once (with resends while its outcome is
// unknown). A lease whose grant an earlier attempt with the same ID may
// have made has its Deadline counted from that attempt, while that
// Deadline has not passed.
func (l *lockCall) send() ([]Lease, error) {
	if !l.unknownSince.IsZero() && time.Since(l.unknownSince) >= l.req.Timeout {
		// The lease that attempt may have taken has passed its Deadline
		// (a store away for longer than the TTL): adopting it would give
		// a Held already lost. Ask for a new one; the old one, if any,
		// expires by itself.
		l.freshID()
	}
	if l.keys == nil {
		lease, err := l.c.send(l.wctx, opGrant, l.req, l.unknownSince)
		if err != nil {
			return nil, err
		}
		return []Lease{lease}, nil
	}
	leases, err := l.c.sendMany(l.wctx, l.keys, l.req)
	if err == nil && !l.unknownSince.IsZero() {
		for i := range leases {
			leases[i].Deadline = l.unknownSince.Add(l.req.Timeout)
		}
	}
	return leases, err
}

// next takes the error of the grant sent at sent, and waits as it tells
// before the next attempt: nil to try again, or Lock's error.
func (l *lockCall) next(err error, sent time.Time) error {
	var held *backend.HeldError
	var oe *OutcomeError
	if l.wctx.Err() != nil && !definite(err) && time.Since(sent) >= maxBackoff {
		// The wait ended during an attempt that the store had left
		// unanswered for a while (a client that waits for a connection,
		// etcd's, fails no sooner): the store is away.
		l.lastErr = &unansweredError{d: time.Since(sent), err: bareError(err)}
	}
	switch {
	case errors.As(err, &held):
		l.lastErr = nil
		l.away.reset()
		return l.waitRelease(err, held)
	case l.storeAway(err):
		// The store is away (a refused dial, a reset, a failover), did not
		// answer, or the outcome is unknown: one more reason to wait. A
		// grant that may have taken effect is resent with its lease ID,
		// so that the lease it may have taken is adopted.
		if errors.As(err, &oe) && l.unknownSince.IsZero() {
			l.unknownSince = sent
		}
		if err := l.away.wait(l.wctx); err != nil {
			return l.stop(l.giveUp(opError("lock", l.key, err)))
		}
		l.w.last = time.Now()
		return nil
	case errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseNotFound):
		// Only an attempt with this ID that took effect (its answer
		// lost, within send's resends or an earlier round) can be
		// answered so: that lease has ended since. Start afresh.
		l.lastErr = nil
		l.freshID()
		if err := l.w.pause(l.wctx); err != nil {
			return l.giveUp(opError("lock", l.key, err))
		}
		return nil
	case l.unknownSince.IsZero() && !errors.As(err, &oe):
		return l.giveUp(err)
	default:
		return l.stop(l.giveUp(err))
	}
}

// storeAway reports whether err, an attempt's error, is the store being
// away for a while (IsTransient) while the wait goes on, and if so keeps it
// as the last store error: the one Lock's error wraps should the wait end
// before the store is back.
func (l *lockCall) storeAway(err error) bool {
	if l.wctx.Err() != nil || !IsTransient(err) {
		return false
	}
	l.lastErr = err
	return true
}

// waitRelease waits for the release of the live lease that refused the
// grant (err, a LockMany's names its key). Another lease is live, so no
// earlier attempt of ours holds the key (its ID would have been answered
// with its lease): the next attempt is a new lease.
func (l *lockCall) waitRelease(err error, held *backend.HeldError) error {
	l.lastHeld = held
	l.freshID()
	w := &l.w
	var ke *keyError
	if l.keys != nil && errors.As(err, &ke) {
		for i, k := range l.keys {
			if k == ke.key {
				w = &l.members[i].w
			}
		}
	}
	if _, ok := l.c.backend.(backend.Inspector); ok && l.cfg.fifo && l.keys == nil {
		err = w.awaitFree(l.wctx)
	} else {
		err = w.waitHeld(l.wctx, held)
	}
	if err != nil {
		return l.giveUp(opError("lock", w.key, err))
	}
	return nil
}

// freshID gives the request a new lease ID: no attempt with the old one
// holds the key.
func (l *lockCall) freshID() {
	l.unknownSince, l.req.LeaseID = time.Time{}, l.c.newLeaseID()
}

// holdMany starts a LockMany's HeldMany of the granted leases, and hands
// each Held its key's entry in the line, as hold does.
func (l *lockCall) holdMany(leases []Lease) *HeldMany {
	m := l.c.startHeldMany(l.ctx, leases, l.ttl, l.cfg.holdConfig)
	for i, mem := range l.members {
		if mem.ln != nil {
			m.held[i].line = mem.ln
			mem.ln.gotKey()
			mem.ln = nil
		}
	}
	return m
}

// hold starts the Held of the granted lease, and hands it the entry in the
// line, which it leaves at once so that the next waiter takes the head.
func (l *lockCall) hold(lease Lease) *Held {
	h := l.c.startHeld(l.ctx, lease, l.ttl, l.cfg.holdConfig)
	if l.ln != nil {
		h.line = l.ln
		l.ln.gotKey()
		l.ln = nil
	}
	return h
}

// giveUp is Lock's error once the wait ended (or failed) with err: when
// WithWaitTimeout ended it, an error that wraps the last refusal.
func (l *lockCall) giveUp(err error) error {
	if l.lastErr != nil && l.wctx.Err() != nil {
		// The wait ended while the store was away: the error wraps the
		// wait's end and the store's last error.
		var waited time.Duration
		if l.timedOut() {
			waited = l.cfg.waitTimeout
		}
		key, last := l.key, l.lastErr
		if ke := (*keyError)(nil); errors.As(err, &ke) {
			key = ke.key
		}
		return opError("lock", key, &awayError{waited: waited, end: l.wctx.Err(), last: bareError(last)})
	}
	lastHeld := l.lastHeld
	if lastHeld == nil && l.w.seen != nil {
		lastHeld = l.w.seen // a head of a line that saw the key held
	}
	if l.timedOut() && lastHeld != nil {
		key := l.key
		if ke := (*keyError)(nil); errors.As(err, &ke) {
			key = ke.key // a LockMany's: the key it waited for
		}
		return opError("lock", key, &waitError{waited: l.cfg.waitTimeout, err: lastHeld})
	}
	return err
}

// stop returns Lock's error once it gives up, first releasing the lease
// an attempt with an unknown outcome may have taken.
func (l *lockCall) stop(err error) error {
	var oe *OutcomeError
	isOutcome := errors.As(err, &oe)
	if l.unknownSince.IsZero() && !isOutcome {
		return err // no attempt of ours may hold the key
	}
	if !isOutcome {
		oe = &OutcomeError{Op: "grant", Key: l.req.Key, Keys: l.keys, LeaseID: l.req.LeaseID, Err: &unsettledError{last: err}}
	}
	return l.c.settle(l.ctx, oe, l.ttl)
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

// awayError is Lock's error when its wait ended (its context, or
// WithWaitTimeout after waited) while the store was away: it wraps the
// wait's end (context.DeadlineExceeded for WithWaitTimeout) and the
// store's last error, which IsTransient.
type awayError struct {
	waited time.Duration // WithWaitTimeout's, or 0
	end    error
	last   error
}

func (e *awayError) Error() string {
	if e.waited > 0 {
		return "gave up after waiting " + e.waited.String() + ", the store unavailable: " + e.last.Error()
	}
	return e.end.Error() + " while the store was unavailable: " + e.last.Error()
}

func (e *awayError) Unwrap() []error { return []error{e.end, e.last} }

// unansweredError is the store's last error when the wait ended during a
// grant attempt that had got no answer for d.
type unansweredError struct {
	d   time.Duration
	err error
}

func (e *unansweredError) Error() string {
	return "no answer in " + e.d.Round(time.Millisecond).String() + " before the wait ended: " + e.err.Error()
}

func (e *unansweredError) Unwrap() []error { return []error{ErrNoAnswer, e.err} }

// bareError is err without the operation and key that the Coordinator
// put before it (a *keyError's, a *keysError's, an *OutcomeError's), for an
// error that names them itself.
func bareError(err error) error {
	switch e := err.(type) {
	case *keyError:
		return e.err
	case *keysError:
		return e.err
	case *OutcomeError:
		return e.Err
	}
	return err
}

// unsettledError is the Err of Lock's *OutcomeError when Lock gave up on
// an attempt's error (one never sent, a wait that ended) after an earlier
// attempt's outcome stayed unknown: the outcome is that earlier one's,
// unknown, and the later error, named by its innermost cause (the key is
// the OutcomeError's to name), is why it was not settled.
type unsettledError struct{ last error }

func (e *unsettledError) Error() string {
	cause := innermost(e.last)
	if ae := (*awayError)(nil); errors.As(e.last, &ae) {
		cause = &awayError{waited: ae.waited, end: ae.end, last: innermost(ae.last)}
	}
	return ErrOutcomeUnknown.Error() + ": an earlier attempt may have taken the lease, and Lock gave up on the next: " + cause.Error()
}

// innermost is the last error in err's chain of single wraps.
func innermost(err error) error {
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(err) {
		err = u
	}
	return err
}

func (e *unsettledError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.last} }

// WithPollInterval bounds how long Lock waits between grant attempts when
// nothing wakes it: the fallback for a missed notification, and the poll of
// a backend that cannot notify (see Lock). It must be at least
// MinPollInterval.
func WithPollInterval(d time.Duration) LockOption {
	return lockOption(func(c *lockConfig) error {
		if d < MinPollInterval {
			return fmt.Errorf("%w: poll interval %v is below the minimum %v", ErrInvalidOption, d, MinPollInterval)
		}
		c.pollInterval = d
		return nil
	})
}

// WithWaitTimeout makes Lock give up waiting for the key after d, with an
// error wrapping ErrLeaseHeld that says how long it waited (or, when the
// store was away at the end, one wrapping context.DeadlineExceeded and the
// store's last error: see IsTransient). It bounds only
// the wait: the lease Lock gets within d is held until its Release, its
// loss or the end of Lock's context, however long after d that is. d must
// be positive. Hold and Do, which do not wait, ignore it.
func WithWaitTimeout(d time.Duration) LockOption {
	return lockOption(func(c *lockConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: wait timeout %v is not positive", ErrInvalidOption, d)
		}
		c.waitTimeout = d
		return nil
	})
}
