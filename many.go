package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/tokenctx"
)

// Several keys at once: GrantMany, HoldMany and LockMany (lock.go) take leases on
// several keys in one atomic step of the store (backend.MultiGranter), so
// a holder never holds some of its keys and waits for the others: no
// deadlock between holders that take overlapping sets in any order.

// errNoMultiGrant is the error of a many-key call on a backend without
// backend.MultiGranter.
var errNoMultiGrant = fmt.Errorf("%w: the backend cannot grant several keys in one atomic step (backend.MultiGranter)", errors.ErrUnsupported)

// GrantMany takes a lease on each of keys in one atomic step, as Grant
// takes one: every key gets its lease, each with its own token (each key's
// tokens keep increasing, and a guard checks each key's as for Grant), or
// none does. It fails with ErrLeaseHeld, naming the key, while any key is
// held, and takes nothing then. The leases come back in the order of keys;
// they share one lease ID, and each is an ordinary lease afterwards (Renew,
// Release, CheckToken take it key by key).
//
// keys are 1 to backend.MaxKeys distinct keys. A backend that cannot grant
// them atomically (it does not implement backend.MultiGranter) gets an
// error wrapping errors.ErrUnsupported: there is no fallback to one grant
// per key. When the outcome stays unknown the error is an *OutcomeError
// with every key (Keys) and the lease ID.
func (c *Coordinator) GrantMany(ctx context.Context, keys []string, ttl time.Duration, margin ...time.Duration) ([]Lease, error) {
	req, err := c.request("", c.newLeaseID(), ttl, margin)
	if err != nil {
		return nil, manyError("grant", keys, err)
	}
	req.Owner, req.LockDelay = c.defaultOwner, c.lockDelay
	return c.sendMany(ctx, keys, req)
}

// sendMany sends a GrantMany of req's lease to keys, resending it with the
// same lease ID while its outcome is unknown, as send does for one key.
func (c *Coordinator) sendMany(ctx context.Context, keys []string, req backend.Request) ([]Lease, error) {
	mg, ok := c.backend.(backend.MultiGranter)
	if !ok {
		return nil, manyError("grant", keys, errNoMultiGrant)
	}
	reqs := make([]backend.Request, len(keys))
	for i, k := range keys {
		reqs[i] = req
		reqs[i].Key = k
	}
	sent := c.clock.now()
	one := func(ctx context.Context) ([]backend.Lease, error) { return mg.GrantMany(ctx, reqs) }
	recs, err := timedAttempt(c, ctx, one)
	if err != nil {
		recs, err = resendUnknown(c, ctx, sent, recs, err, func() ([]backend.Lease, error) { return timedAttempt(c, ctx, one) })
	}
	if err != nil {
		key := ""
		if len(keys) > 0 {
			key = keys[0]
		}
		if i, ok := backend.ManyIndex(err); ok && i < len(keys) {
			key = keys[i]
		}
		c.obs.request(ctx, opGrant, key, sent, 0, err)
		if errors.Is(err, ErrOutcomeUnknown) {
			return nil, &OutcomeError{Op: "grant", Key: key, Keys: keys, LeaseID: req.LeaseID, Err: err}
		}
		return nil, manyError("grant", keys, err)
	}
	leases := make([]Lease, len(recs))
	for i, rec := range recs {
		c.obs.request(ctx, opGrant, rec.Key, sent, rec.Token, nil)
		leases[i] = leaseOf(rec, sent.Add(req.Timeout))
	}
	return leases, nil
}

// manyError names the key a GrantMany error is about (a
// *backend.ManyError's), or the keys when it is about all of them.
func manyError(op string, keys []string, err error) error {
	var me *backend.ManyError
	if errors.As(err, &me) && me.Index >= 0 && me.Index < len(keys) {
		return opError(op, keys[me.Index], me.Err)
	}
	return &keysError{op: op, keys: keys, err: err}
}

// keysError is an error of an operation on several keys, none of which is
// to blame: it names the first and how many more.
type keysError struct {
	op   string
	keys []string
	err  error
}

func (e *keysError) Error() string {
	return e.op + " " + keysLabel(e.keys) + ": " + e.err.Error()
}

func (e *keysError) Unwrap() error { return e.err }

// HoldMany takes leases on keys in one atomic step, as GrantMany does
// (ErrLeaseHeld, naming the key, when one is held; nothing is taken then),
// and keeps them renewed as Hold keeps one, until Release, the parent
// context ending, or the loss of any one of them: the HeldMany's Context
// ends then, and the others are released. Its options are Hold's; each
// lease is renewed with its own request, all on one schedule.
//
// When the grant's outcome stays unknown, HoldMany releases every lease it
// may have taken before returning the *OutcomeError (with Settled set),
// as Hold does for one.
func (c *Coordinator) HoldMany(ctx context.Context, keys []string, ttl time.Duration, opts ...HoldOption) (*HeldMany, error) {
	cfg, err := c.holdConfig(ttl, opts)
	if err != nil {
		return nil, manyError("hold", keys, err)
	}
	req, err := c.request("", c.newLeaseID(), cfg.grantTimeout(ttl), []time.Duration{cfg.margin})
	if err != nil {
		return nil, manyError("hold", keys, err)
	}
	req.Owner, req.LockDelay = cfg.owner, cfg.lockDelay
	leases, err := c.sendMany(ctx, keys, req)
	if err != nil {
		return nil, c.settle(ctx, err, ttl)
	}
	return c.startHeldMany(ctx, leases, ttl, cfg), nil
}

// HeldMany is leases on several keys taken in one atomic grant (HoldMany)
// and kept alive together: each is renewed in the background as a Held's
// is, and the loss of any one ends them all. Its Context ends at the
// earliest of any lease's loss (see Held), the parent context ending, and
// Release; it carries every key's token (guard.TokensFromContext), so the
// carriers in guard/httpguard and guard/grpcguard send them all.
//
// A HeldMany is safe for concurrent use. Call Release when done, even after
// a loss: it stops the renewals and frees the keys early.
type HeldMany struct {
	held   []*Held // in the order of the keys
	ctx    context.Context
	cancel context.CancelCauseFunc
	warn   chan Lease
	stops  []func() bool // the context.AfterFuncs that end ctx with a lease's

	released sync.Once
	relErr   error
}

func (c *Coordinator) startHeldMany(parent context.Context, leases []Lease, ttl time.Duration, cfg holdConfig) *HeldMany {
	ctx, cancel := context.WithCancelCause(parent)
	m := &HeldMany{cancel: cancel}
	if cfg.warnBefore > 0 {
		m.warn = make(chan Lease, 1)
		cfg.warnTo = m.warn
	}
	m.ctx = manyContext{Context: ctx, m: m}
	for _, l := range leases {
		h := c.startHeld(ctx, l, ttl, cfg)
		inner := h.ctx.(heldContext).Context
		m.held = append(m.held, h)
		m.stops = append(m.stops, context.AfterFunc(inner, func() { cancel(context.Cause(inner)) }))
	}
	return m
}

// Leases returns each lease as of its latest confirmed grant or renewal, in
// the order of the keys.
func (m *HeldMany) Leases() []Lease {
	leases := make([]Lease, len(m.held))
	for i, h := range m.held {
		leases[i] = h.Lease()
	}
	return leases
}

// Context returns a context that ends when the leases do (see HeldMany).
// Its cause (context.Cause) says why, as a Held's does. It carries every
// key's token (guard.TokensFromContext), read when asked as a Held's is,
// for the carriers in guard/httpguard and guard/grpcguard to send them all
// to the service that writes: that service writes each key's resource
// under that key's token. With more than one key, guard.TokenFromContext,
// which answers for one token, finds none.
func (m *HeldMany) Context() context.Context { return m.ctx }

// Done is Context().Done().
func (m *HeldMany) Done() <-chan struct{} { return m.ctx.Done() }

// Err returns nil while the leases are held and after Release when they
// were held until then; the error of the first loss (wrapping ErrLeaseLost
// and naming its key) after one; and the parent context's cause when that
// ended first.
func (m *HeldMany) Err() error {
	m.checkDeadlines()
	if cause := context.Cause(m.ctx.(manyContext).Context); cause != nil && cause != errReleased {
		return cause
	}
	for _, h := range m.held {
		if err := h.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Warning receives a lease when less than the WithWarning duration remains
// before its Deadline without a newer confirmed renewal. It is nil (never
// ready) without WithWarning. It has room for one value; a warning that
// finds it full is dropped.
func (m *HeldMany) Warning() <-chan Lease { return m.warn }

// Release stops the renewals and releases every lease, in the order of the
// keys. It returns nil when the leases were held until now; after a loss it
// still releases the others and returns Err(). Calling it again returns the
// same result. No goroutine of the HeldMany outlives Release.
func (m *HeldMany) Release(ctx context.Context) error {
	m.released.Do(func() {
		m.checkDeadlines()
		lost := m.Err()
		for _, stop := range m.stops {
			stop() // a member's own release must not end the others
		}
		var errs []error
		for _, h := range m.held {
			if err := h.Release(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		m.cancel(errReleased)
		switch {
		case lost != nil:
			m.relErr = lost
		case len(errs) > 0:
			m.relErr = errors.Join(errs...)
		}
	})
	return m.relErr
}

// checkDeadlines ends every lease, as the expiry timers do, when one's
// Deadline has passed on the monotonic clock.
func (m *HeldMany) checkDeadlines() {
	for _, h := range m.held {
		h.checkDeadline()
		if inner := h.ctx.(heldContext).Context; inner.Err() != nil {
			m.cancel(context.Cause(inner))
			return
		}
	}
}

// manyContext is a HeldMany's context: heldContext's rules over every
// lease.
type manyContext struct {
	context.Context
	m *HeldMany
}

// Err is the embedded context's, once the Deadlines have been checked.
func (c manyContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	c.m.checkDeadlines()
	return c.Context.Err()
}

// Done is the embedded context's, once the Deadlines have been checked.
func (c manyContext) Done() <-chan struct{} {
	if c.Context.Err() == nil {
		c.m.checkDeadlines()
	}
	return c.Context.Done()
}

// Deadline is the earliest of the leases' Deadlines and the parent's.
func (c manyContext) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	for _, h := range c.m.held {
		if hd := h.Lease().Deadline; !ok || hd.Before(d) {
			d, ok = hd, true
		}
	}
	return d, ok
}

// Value carries every lease's key and token (see HeldMany.Context).
func (c manyContext) Value(k any) any {
	if tokenctx.IsKey(k) {
		tokens := make([]tokenctx.Token, len(c.m.held))
		for i, h := range c.m.held {
			tokens[i] = tokenctx.Token{Resource: h.key, Token: h.Token()}
		}
		return tokenctx.Value(tokens...)
	}
	if c.Context.Err() == nil {
		c.m.checkDeadlines()
	}
	return c.Context.Value(k)
}

// manyKeyReqs returns a request per key with nothing but the key, for
// CheckMany's key checks and KeyOrder.
func manyKeyReqs(keys []string) []backend.Request {
	reqs := make([]backend.Request, len(keys))
	for i, k := range keys {
		reqs[i] = backend.Request{Key: k, LeaseID: "x", Timeout: time.Second}
	}
	return reqs
}
