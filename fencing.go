package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencing-go/fencing/backend"
)

// DefaultMargin is the margin used when neither the call nor WithDefaultMargin
// gives one.
const DefaultMargin = time.Second

// DefaultRequestTimeout is the Coordinator's bound on each request attempt
// unless WithRequestTimeout gives another.
const DefaultRequestTimeout = 10 * time.Second

// Coordinator is the entry point: it grants, renews, releases and checks
// leases on one backend. It is safe for concurrent use. It does not own the
// backend: close the backend yourself when done.
type Coordinator struct {
	config  // what its Options set (options.go)
	backend backend.Backend
	ids     *idSource
	clock   sendClock
	obs     observer // metrics, logs and traces (metrics.go, trace.go)
	turns   turns    // LockAny's waiters take turns per key set (waiter.go)
}

// WithDefaultMargin sets the margin used by calls that give none (default
// DefaultMargin). A negative margin is refused (see Option).
func WithDefaultMargin(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.refuse("WithDefaultMargin", fmt.Errorf("%w: %v is negative", ErrInvalidMargin, d))
			return
		}
		c.defaultMargin = d
	}
}

// WithDefaultOwner sets the owner of every lease this Coordinator takes
// (Grant, Hold, Lock, Do) unless a call's WithOwner gives another: a public
// label for operators, such as "host-3/pid 4711", stored with the lease and
// reported by Inspect and List (KeyState.Owner). It is never a credential.
// The default is no owner. An owner that backend.CheckOwner refuses is
// refused (see Option).
//
// It is the way to give Grant an owner: Grant's variadic margin leaves no
// room for options, and a process usually has one identity for all its
// leases.
func WithDefaultOwner(owner string) Option {
	return func(c *config) {
		if err := backend.CheckOwner(owner); err != nil {
			c.refuse("WithDefaultOwner", err)
			return
		}
		c.defaultOwner = owner
	}
}

// WithOutcomeRetries sets how many times a request that ended with an
// unknown outcome (backend.ErrOutcomeUnknown, such as a lost response) is
// sent again with the same lease ID before the error is returned
// (default 3). Every backend recognises a resent request, so a retry never
// mints a second token. Retries stop when the context is done, and once the
// request timeout (WithRequestTimeout) has passed since the first attempt.
func WithOutcomeRetries(n int) Option {
	return func(c *config) { c.retries = max(n, 0) }
}

// WithRequestTimeout bounds each attempt of every request the Coordinator
// sends (a grant, renewal, release, token check, inspection, listing, forced
// release, Lock's subscription, and each resend of an ambiguous request) to
// d, when the caller's context allows longer (default
// DefaultRequestTimeout; zero or a negative d turns the bound off). A
// request whose outcome is unknown is resent (WithOutcomeRetries) only while
// less than d has passed since its first attempt. So a call with
// context.Background() against a server that is down, frozen or not the
// server expected returns: Grant within about d (at most 2d, when a resend
// starts just before d has passed), and Hold, which then releases the lease
// that grant may have taken, within one d more.
//
// An attempt cut off by the bound fails with an error wrapping
// ErrNoAnswer, and ErrOutcomeUnknown as well when it may have reached the
// server (a grant's is then an *OutcomeError, as for any unknown outcome).
// A backend whose requests never leave the process (backend.InProcess, such
// as memorybackend) is not bounded: its requests do not wait on a server.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.reqTimeout = max(d, 0) }
}

// New returns a Coordinator over b.
func New(b backend.Backend, opts ...Option) *Coordinator {
	c := &Coordinator{config: config{defaultMargin: DefaultMargin, retries: 3, reqTimeout: DefaultRequestTimeout}, backend: b, ids: newIDSource()}
	for _, o := range opts {
		o(&c.config)
	}
	if _, ok := b.(backend.InProcess); ok {
		c.reqTimeout = 0
	}
	c.obs.init(b, &c.config)
	releaseWhenCollected(c, c.obs.observeSize(b, c.reqTimeout))
	return c
}

// Grant takes a new lease on key for ttl, with the coordinator keeping it for
// a further margin (at most one; default the Coordinator's default
// margin). It fails with ErrLeaseHeld while another lease on key is live.
//
// Grant takes the lease and leaves it to the caller; Hold also keeps it
// renewed, Lock waits for the key, and Do runs a function under a held lease.
// When the outcome stays unknown the error is an *OutcomeError with the lease
// ID, so the caller can release or adopt the lease it may have taken.
func (c *Coordinator) Grant(ctx context.Context, key string, ttl time.Duration, margin ...time.Duration) (Lease, error) {
	req, err := c.request(key, c.newLeaseID(), ttl, margin)
	if err != nil {
		return Lease{}, opError("grant", key, err)
	}
	req.Owner, req.LockDelay = c.defaultOwner, c.lockDelay
	return c.send(ctx, opGrant, req, time.Time{})
}

// Acquire is an alias of Grant.
func (c *Coordinator) Acquire(ctx context.Context, key string, ttl time.Duration, margin ...time.Duration) (Lease, error) {
	return c.Grant(ctx, key, ttl, margin...)
}

// Renew extends the live lease leaseID on key to ttl (plus margin) from now,
// keeping its token. A lease whose time ran out gets ErrLeaseExpired; an ID
// that is not the key's current lease gets ErrLeaseNotFound. Either way
// nothing changes, and the holder must stop using the token.
func (c *Coordinator) Renew(ctx context.Context, key, leaseID string, ttl time.Duration, margin ...time.Duration) (Lease, error) {
	req, err := c.request(key, leaseID, ttl, margin)
	if err != nil {
		return Lease{}, opError("renew", key, err)
	}
	return c.send(ctx, opRenew, req, time.Time{})
}

// Extend is an alias of Renew.
func (c *Coordinator) Extend(ctx context.Context, key, leaseID string, ttl time.Duration, margin ...time.Duration) (Lease, error) {
	return c.Renew(ctx, key, leaseID, ttl, margin...)
}

// Release ends the live lease leaseID on key at once: its token stops
// checking true, and the key is free. Releasing a lease already released is
// not an error; releasing an expired one returns ErrLeaseExpired and one
// that is not the key's lease ErrLeaseNotFound, except on a resend after a
// lost answer (see WithOutcomeRetries): the lost attempt may have released
// it before another lease took the key, so that is not an error either.
func (c *Coordinator) Release(ctx context.Context, key, leaseID string) error {
	sp := c.obs.beginRelease(ctx, key)
	ctx, ts := c.obs.startSpan(ctx, SpanRelease, key, trace.SpanKindClient)
	release := resends(ts, func(ctx context.Context) (struct{}, error) { return struct{}{}, c.backend.Release(ctx, key, leaseID) })
	var start time.Time // read only when the resend budget needs it
	if c.reqTimeout > 0 {
		start = c.clock.now()
	}
	_, err := timedAttempt(c, ctx, release)
	if err != nil {
		uncertain := errors.Is(err, ErrOutcomeUnknown)
		_, err = resendUnknown(c, ctx, start, struct{}{}, err, func() (struct{}, error) { return timedAttempt(c, ctx, release) })
		if uncertain && errors.Is(err, ErrLeaseNotFound) {
			// The attempt whose answer was lost may have ended the lease,
			// and another since taken the key: released, as far as can be
			// known, and not the caller's either way.
			err = nil
		}
	}
	c.obs.done(ctx, sp, opRelease, key, 0, err)
	ts.end(0, err)
	if err != nil {
		return requestError("release", key, leaseID, err)
	}
	return nil
}

// CheckToken reports whether token is the token of key's live lease. Tokens
// of superseded, released and expired leases, and tokens never issued, check
// false.
//
// Checking and then writing is a race: the lease can end between the two.
// A resource that must refuse stale writers checks the token in the same
// atomic step as the write; see package guard.
func (c *Coordinator) CheckToken(ctx context.Context, key string, token uint64) (bool, error) {
	current, live, err := c.Token(ctx, key)
	if err != nil {
		return false, err
	}
	return live && current == token, nil
}

// ValidateToken is an alias of CheckToken.
func (c *Coordinator) ValidateToken(ctx context.Context, key string, token uint64) (bool, error) {
	return c.CheckToken(ctx, key, token)
}

// Token returns the token of key's live lease, with live == true, or zero
// and live == false when no lease on key is live.
func (c *Coordinator) Token(ctx context.Context, key string) (token uint64, live bool, err error) {
	sp := c.obs.begin(ctx)
	if c.reqTimeout == 0 {
		token, live, err = c.backend.Token(ctx, key)
	} else {
		var r tokenResult
		r, err = timedAttempt(c, ctx, func(ctx context.Context) (tokenResult, error) {
			t, l, err := c.backend.Token(ctx, key)
			return tokenResult{t, l}, err
		})
		token, live = r.token, r.live
	}
	c.obs.done(ctx, sp, opToken, key, token, err)
	if err != nil {
		return 0, false, opError("token", key, err)
	}
	return token, live, nil
}

// newLeaseID returns a fresh lease ID (see Lease.ID).
func (c *Coordinator) newLeaseID() string { return c.ids.next() }

// request builds a grant or renew request, without an owner (a grant sets
// it; a renewal keeps the stored one), or returns the Coordinator's bad
// option (see Option). Its arguments are checked by the
// backend, which every backend must do (package conformance holds them to
// it); the Coordinator checks only what it alone takes: the margins.
func (c *Coordinator) request(key, leaseID string, ttl time.Duration, margins []time.Duration) (backend.Request, error) {
	if c.badOption != nil {
		return backend.Request{}, c.badOption
	}
	margin := c.defaultMargin
	switch len(margins) {
	case 0:
	case 1:
		margin = margins[0]
	default:
		return backend.Request{}, fmt.Errorf("%w: %d margins given, at most one allowed", ErrInvalidMargin, len(margins))
	}
	return backend.Request{Key: key, LeaseID: leaseID, Timeout: ttl, Margin: margin}, nil
}

// send runs a grant (k opGrant: backend.Backend.Grant) or a renewal (k
// opRenew: backend.Backend.Renew), resending it with the same lease ID while
// its outcome is unknown, and turns the backend's record into a Lease. Its
// Deadline counts from just before the first attempt left, or from
// sentBefore when that is set (an earlier attempt with the same ID, whose
// outcome was unknown, may be the one that took effect).
func (c *Coordinator) send(ctx context.Context, k op, req backend.Request, sentBefore time.Time) (Lease, error) {
	sent := c.clock.now()
	if !sentBefore.IsZero() {
		sent = sentBefore
	}
	ctx, ts := c.obs.requestSpan(ctx, opNames[k], req.Key, req.Owner)
	one := resends(ts, func(ctx context.Context) (backend.Lease, error) {
		if k == opRenew {
			return c.backend.Renew(ctx, req)
		}
		return c.backend.Grant(ctx, req)
	})
	start := sent
	if !sentBefore.IsZero() {
		start = c.clock.now() // this call's first attempt, for the resend budget
	}
	rec, err := timedAttempt(c, ctx, one)
	if err != nil {
		rec, err = resendUnknown(c, ctx, start, rec, err, func() (backend.Lease, error) { return timedAttempt(c, ctx, one) })
	}
	if err != nil && !errors.Is(err, ErrNoAnswer) && ctx.Err() != nil {
		if cause := context.Cause(ctx); cause == errNoAnswerCause || errors.Is(cause, errDeadlinePassed) {
			err = &noAnswerError{err: err} // a held lease's renewal cut off at its Deadline
		}
	}
	c.obs.request(ctx, k, req.Key, sent, rec.Token, err)
	ts.end(rec.Token, err)
	attemptEvent(ctx, err)
	if err != nil {
		return Lease{}, requestError(opNames[k], req.Key, req.LeaseID, err)
	}
	return leaseOf(rec, sent.Add(req.Timeout)), nil
}

// opError names the operation and the key, once and shortened.
func opError(op, key string, err error) error {
	return &keyError{op: op, key: key, err: err}
}

// keyError is an error of an operation on a key. It builds its message only
// when asked: a waiter's refused grants (ErrLeaseHeld, again and again)
// never are.
type keyError struct {
	op, key string
	err     error
}

func (e *keyError) Error() string { return e.op + " " + backend.QuoteKey(e.key) + ": " + e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// requestError is opError, or an *OutcomeError when the outcome is unknown.
func requestError(op, key, leaseID string, err error) error {
	if errors.Is(err, ErrOutcomeUnknown) {
		return &OutcomeError{Op: op, Key: key, LeaseID: leaseID, Err: err}
	}
	return opError(op, key, err)
}

// resendUnknown takes the result of a request's first attempt, begun at start, v
// and err (not nil), and runs call (which carries the same lease ID) again
// while the outcome is unknown, up to the Coordinator's retry budget and,
// with a request timeout, only while less than that has passed since
// start: a server that does not answer gets about one request timeout (at
// most two) per call, not one per attempt. When a resend
// ends without a verdict (the context ended, the backend was closed) after
// an attempt whose outcome was unknown, the error wraps ErrOutcomeUnknown
// too: the earlier attempt may have taken effect, and the caller must not
// read "canceled" as "nothing happened". The first attempt is the caller's
// own call, so that the common case, a first attempt with a verdict, costs
// no call through a function value.
func resendUnknown[T any](c *Coordinator, ctx context.Context, start time.Time, v T, err error, call func() (T, error)) (T, error) {
	var uncertain error
	for attempt := 0; ; attempt++ {
		switch {
		case err == nil:
			return v, nil
		case errors.Is(err, ErrOutcomeUnknown):
			uncertain = err
		case uncertain != nil && !isVerdict(err):
			err = fmt.Errorf("%w (resend ended: %w)", uncertain, err)
		}
		if !c.retry(ctx, start, err, attempt) {
			return v, err
		}
		v, err = call()
	}
}

// retry reports whether a request begun at start that failed with err on
// the given attempt should be sent again, after a short pause.
func (c *Coordinator) retry(ctx context.Context, start time.Time, err error, attempt int) bool {
	if attempt >= c.retries || !errors.Is(err, ErrOutcomeUnknown) || ctx.Err() != nil {
		return false
	}
	if c.reqTimeout > 0 && time.Since(start) >= c.reqTimeout {
		return false
	}
	return sleep(ctx, time.Duration(10<<attempt)*time.Millisecond) == nil
}

// tokenResult is what Token returns, as one value for timedAttempt.
type tokenResult struct {
	token uint64
	live  bool
}

// timedAttempt runs call, one attempt of a request, under ctx bounded by the
// Coordinator's request timeout when ctx allows longer. An attempt the bound
// cut off fails with a *noAnswerError.
func timedAttempt[T any](c *Coordinator, ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	d := c.reqTimeout
	if d == 0 {
		return call(ctx)
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return call(ctx)
	}
	actx, cancel := context.WithTimeoutCause(ctx, d, errNoAnswerCause)
	defer cancel()
	v, err := call(actx)
	if err != nil && ctx.Err() == nil && context.Cause(actx) == errNoAnswerCause {
		err = &noAnswerError{timeout: d, err: err}
	}
	return v, err
}

// errDeadlinePassed is in the cause of a held lease's context that its
// Deadline ended: a renewal cut off by it got no answer in time.
var errDeadlinePassed = errors.New("deadline passed")

// errNoAnswerCause is the cause of an attempt's context that the request
// timeout ended.
var errNoAnswerCause = errors.New("request timeout")

// noAnswerError is the error of an attempt that the request timeout (or a
// held lease's Deadline) cut off: the backend's error, which says whether
// the outcome is unknown, with the bound.
type noAnswerError struct {
	timeout time.Duration // 0: the held lease's Deadline
	err     error
}

func (e *noAnswerError) Error() string {
	if e.timeout == 0 {
		return "no answer before the lease's Deadline: " + e.err.Error()
	}
	return "no answer within the request timeout of " + e.timeout.String() + ": " + e.err.Error()
}

func (e *noAnswerError) Unwrap() []error { return []error{ErrNoAnswer, e.err} }

// sleep waits for d or until ctx is done, and returns ctx's error if it is.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
