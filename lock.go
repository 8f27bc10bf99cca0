package fencing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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
// that lease and returns an *OutcomeError with Settled set. A lease whose
// grant was sent so long before it took effect (a request that waited for
// the store to come back) that its first renewal is already due is renewed
// before Lock returns it, so the holder gets its TTL counted from that
// renewal; one that ended before it could be renewed is never returned,
// and the wait goes on. A canceled waiter leaves no subscription or
// goroutine behind.
func (c *Coordinator) Lock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Held, error) {
	return c.lockHeld(ctx, []string{key}, lockOne, ttl, opts)
}

// lockHeld is Lock, and LockAny: a wait for keys that ends in one Held.
func (c *Coordinator) lockHeld(ctx context.Context, keys []string, need need, ttl time.Duration, opts []LockOption) (h *Held, err error) {
	l, err := c.newLockCall(ctx, keys, need, ttl, opts)
	if err != nil {
		if need == lockAny {
			return nil, &keysError{op: "lock any", keys: keys, err: err}
		}
		return nil, opError("lock", keys[0], err)
	}
	l.observe() // under the first key
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
	if len(keys) == 0 {
		return nil, manyError("lock", keys, backend.CheckMany(nil))
	}
	l, err := c.newLockCall(ctx, keys, lockAll, ttl, opts)
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

// LockAny waits until one of keys can be granted, then holds that one
// lease as Lock does; the Held's Lease().Key says which key it got. It
// subscribes to every key before its first attempt, tries them one by one
// (from a random one, so that waiters spread over the keys) until one is
// granted, and when every key is held waits as Lock does, for whichever
// key is announced free first or whose holder's lease should have ended
// first (the refused grant's time left), then tries that key. It holds
// at most one key at any moment. Its options are Lock's; its wait is
// traced and measured as Lock's, under the first key.
//
// With WithFIFO it waits in every key's line at once, and tries a key
// only at the head of its line: it gets the first key whose line it heads
// and that is free, and leaves every other line as it gets it. A waiter
// that heads one key's line while the key is held (by a grant from outside
// the line, or by the waiter that went before, until its release) keeps
// its place in the other lines; the next waiter of that line waits behind
// it until then, as it would behind a Lock.
//
// keys are one or more distinct keys (backend.CheckKey); the backend needs
// no capability beyond Lock's. When a grant's outcome stays unknown,
// LockAny resends it to the same key with the same lease ID, and releases
// the lease it may have taken if the wait ends first, as Lock does.
func (c *Coordinator) LockAny(ctx context.Context, keys []string, ttl time.Duration, opts ...LockOption) (*Held, error) {
	if err := checkAnyKeys(keys); err != nil {
		return nil, &keysError{op: "lock any", keys: keys, err: err}
	}
	return c.lockHeld(ctx, keys, lockAny, ttl, opts)
}

// checkAnyKeys checks LockAny's keys: one or more, each valid, none twice.
func checkAnyKeys(keys []string) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no keys", ErrInvalidKey)
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if err := backend.CheckKey(k); err != nil {
			return err
		}
		if seen[k] {
			return fmt.Errorf("%w: %s", backend.ErrDuplicateKey, backend.QuoteKey(k))
		}
		seen[k] = true
	}
	return nil
}

// lockCall is one Lock, LockMany or LockAny call: a wait for a set of keys
// (keySet, waiter.go) that needs all of them (Lock's one key, LockMany's)
// or any one (LockAny's). Its phases, in order: newLockCall checks the
// options and builds the grant request; observe starts the wait's traces
// and metrics; wait runs queue, which waits in the keys' lines (WithFIFO)
// and subscribes to the keys' releases, watch, which waits at the head of
// each line for the key to be free, and grant, which sends the request
// until it succeeds, waiting between attempts as each refusal tells
// (next). hold (holdMany) starts the Held (HeldMany). giveUp and stop make
// the call's error when it stops short; observeEnd records the end.
type lockCall struct {
	c      *Coordinator
	ctx    context.Context // bounds the call and the held lease
	wctx   context.Context // bounds the wait: ctx, or WithWaitTimeout's
	cancel context.CancelFunc
	keys   []string
	need   need
	any    bool // need == lockAny
	ttl    time.Duration
	cfg    lockConfig
	req    backend.Request // Key: the key of the latest attempt (LockAny), or the first key
	set    *keySet
	obs    *lockObs // the wait's traces and metrics (trace.go)

	lastHeld     error         // the latest refusal for a live lease
	lastErr      error         // the store's latest transient error (IsTransient), nil once it answers
	away         backoff       // paces the attempts while the store is away
	unknownSince time.Time     // first send of req.LeaseID whose outcome is unknown
	slowest      time.Duration // the longest an answered attempt took (unansweredAfter)
	try          []int         // LockAny: the keys to try next, by index
	leaveTurn    func()        // LockAny without WithFIFO: leaves the in-process line (turns)
}

// need is what a lockCall needs of its keys.
type need int

const (
	lockOne need = iota // Lock: its one key
	lockAll             // LockMany: every key, in one GrantMany
	lockAny             // LockAny: any one key
)

// newLockCall checks the options and builds the grant request of a wait
// for keys, needing any one of them (LockAny) or all. Its error does not
// name the keys: the caller names them.
func (c *Coordinator) newLockCall(ctx context.Context, keys []string, need need, ttl time.Duration, opts []LockOption) (*lockCall, error) {
	cfg, err := c.lockConfig(ttl, opts)
	if err != nil {
		return nil, err
	}
	req, err := c.request(keys[0], c.newLeaseID(), cfg.grantTimeout(ttl), []time.Duration{cfg.margin})
	if err != nil {
		return nil, err
	}
	req.Owner, req.LockDelay = cfg.owner, cfg.lockDelay
	l := &lockCall{c: c, ctx: ctx, wctx: ctx, cancel: func() {}, keys: keys, need: need, any: need == lockAny, ttl: ttl, cfg: cfg, req: req}
	if cfg.waitTimeout > 0 {
		l.wctx, l.cancel = context.WithTimeoutCause(ctx, cfg.waitTimeout, errWaitTimeout)
	}
	l.set = newKeySet(c, keys, cfg.pollInterval)
	return l, nil
}

// observe starts recording the wait (trace.go): its span, which the wait's
// context then carries, and its metrics, under the call's first key.
func (l *lockCall) observe() {
	l.obs = l.c.obs.lockBegin(l.ctx, l.keys[0], l.cfg.fifo)
	l.wctx = l.obs.waitContext(l.wctx)
}

// observeEnd records the end of the wait: the call got the lease of token
// (a LockMany's first), or gave up with err.
func (l *lockCall) observeEnd(token uint64, err error) {
	l.c.obs.lockEnd(l.ctx, l.obs, token, l.timedOut(), err)
}

// wait waits for the keys and grants them (one of them, for LockAny):
// queue, watch, then grant.
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

// close ends what the call started and no Held took over (see
// keySet.close), and the wait's timer.
func (l *lockCall) close() {
	if l.leaveTurn != nil {
		l.leaveTurn()
	}
	l.set.close()
	l.cancel()
}

// keyOrder returns the keys' indexes in key order (byte order), the one
// order in which every waiter joins lines and subscribes.
func (l *lockCall) keyOrder() []int {
	if len(l.keys) == 1 {
		return []int{0}
	}
	return backend.KeyOrder(manyKeyReqs(l.keys))
}

// queue subscribes to the keys' releases before the first grant attempt,
// so that none is missed. With WithFIFO it first joins the keys' lines: a
// wait for every key joins each line in key order, one after another,
// waits to reach its head, and subscribes to that key at its head (see
// LockMany); LockAny's joins every line, and waits for the heads in the
// background (keySet.awaitTurns) while it waits for the keys. LockAny
// without WithFIFO first waits for its turn among this Coordinator's
// LockAny waiters on the same keys (turns).
func (l *lockCall) queue() error {
	if l.any && !l.cfg.fifo {
		leave, err := l.c.turns.wait(l.wctx, l.keys)
		if err != nil {
			l.lastHeld = errTurnAhead
			return l.giveUp(l.named(-1, err))
		}
		l.leaveTurn = leave
	}
	for _, i := range l.keyOrder() {
		if l.cfg.fifo {
			if err := l.join(i); err != nil {
				return l.giveUp(err)
			}
			if !l.any {
				if err := l.awaitTurn(i); err != nil {
					return l.giveUp(err)
				}
			}
		}
		if err := l.subscribe(i); err != nil {
			return l.giveUp(err)
		}
	}
	if l.any && l.cfg.fifo {
		l.set.awaitTurns(l.wctx, l.keyOrder())
	}
	return nil
}

// join puts the waiter in key i's line, waiting while the store is away.
func (l *lockCall) join(i int) error {
	key := l.keys[i]
	for {
		ln, err := l.c.joinLine(l.wctx, key, l.ttl, l.cfg.pollInterval)
		if err == nil {
			l.set.keys[i].ln = ln
			l.away.reset()
			return nil
		}
		if !l.storeAway(err) {
			return opError("lock", key, err)
		}
		if err := l.away.wait(l.wctx); err != nil {
			return opError("lock", key, err)
		}
	}
}

// awaitTurn waits to reach the head of key i's line.
func (l *lockCall) awaitTurn(i int) error {
	ln := l.set.keys[i].ln
	if err := ln.waitTurn(l.wctx); err != nil {
		if ln.lastErr != nil {
			l.lastErr = ln.lastErr
		} else if l.lastHeld == nil {
			l.lastHeld = &lineError{ahead: ln.ahead}
		}
		return opError("lock", l.keys[i], err)
	}
	l.lastErr = nil
	return nil
}

// subscribe subscribes to key i's releases. While the store is away
// (IsTransient), the wait polls instead (see keySet.subscribe).
func (l *lockCall) subscribe(i int) error {
	if err := l.set.subscribe(l.wctx, i); err != nil {
		return opError("lock", l.keys[i], err)
	}
	if w := l.set.keys[i].unsubscribed; w != nil {
		l.lastErr = w
	}
	return nil
}

// watch, with WithFIFO, waits at the head of each line, in key order, for
// the release of the key by the waiter that went before (it left the line
// when it got the key), so that the one grant attempt finds the key free.
// LockAny's tries a key as soon as it heads the key's line: it may head
// several, and waits for whichever frees up first.
func (l *lockCall) watch() error {
	if !l.cfg.fifo || l.any {
		return nil
	}
	for _, i := range l.keyOrder() {
		if err := l.set.awaitFree(l.wctx, i); err != nil {
			return l.giveUp(opError("lock", l.keys[i], err))
		}
	}
	return nil
}

// grant sends the grant request until a lease is granted (one per key for
// a LockMany, one for a LockAny) or the call ends.
func (l *lockCall) grant() ([]Lease, error) {
	if l.any {
		l.try = l.shuffled()
		if l.cfg.fifo {
			l.try = nil // no head yet
		}
	}
	for {
		if l.any && len(l.try) == 0 {
			// LockAny with WithFIFO, at the head of no line yet.
			if err := l.waitKeys(); err != nil {
				return nil, err
			}
			continue
		}
		sent := time.Now()
		leases, err := l.send()
		if err == nil {
			leases, err = l.refresh(leases)
		}
		if err == nil {
			return leases, nil
		}
		if err := l.next(err, sent); err != nil {
			return nil, err
		}
	}
}

// shuffled returns LockAny's keys to try: all of them (the heads of their
// lines, with WithFIFO), in order from a random one.
func (l *lockCall) shuffled() []int {
	var keys []int
	off := rand.N(len(l.keys))
	for n := range len(l.keys) {
		i := (off + n) % len(l.keys)
		if !l.cfg.fifo || l.set.keys[i].atHead {
			keys = append(keys, i)
		}
	}
	return keys
}

// send sends the grant request once (with resends while its outcome is
// unknown): to every key (a wait for all of them), or to each key of try
// in turn until one is granted (LockAny). A lease whose grant an earlier
// attempt with the same ID may have made has its Deadline counted from
// that attempt, while that Deadline has not passed.
func (l *lockCall) send() ([]Lease, error) {
	if !l.unknownSince.IsZero() && time.Since(l.unknownSince) >= l.req.Timeout {
		// The lease that attempt may have taken has passed its Deadline
		// (a store away for longer than the TTL): adopting it would give
		// a Held already lost. Ask for a new one; the old one, if any,
		// expires by itself.
		l.freshID()
	}
	switch {
	case l.any:
		if !l.unknownSince.IsZero() {
			l.try = []int{slices.Index(l.keys, l.req.Key)} // adopt what that attempt took
		}
		var err error
		for _, i := range l.try {
			l.req.Key = l.keys[i]
			var lease Lease
			lease, err = l.c.send(l.wctx, opGrant, l.req, l.unknownSince)
			var held *backend.HeldError
			if err == nil {
				return []Lease{lease}, nil
			} else if !errors.As(err, &held) {
				return nil, err
			}
			l.set.refused(i, held)
			l.lastHeld = held
		}
		return nil, err
	case l.need == lockOne:
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

// unansweredAfter is how long an attempt in flight when the wait ends must
// have gone unanswered for the store to count as away, when no attempt
// since the last answer has failed otherwise: four times the slowest
// answer this wait has had, within [100ms, maxBackoff]. A store that went
// away while the waiter waited for a poll leaves it only the last attempt
// to judge by, sent maybe a moment before the wait's end.
func (l *lockCall) unansweredAfter() time.Duration {
	return min(max(4*l.slowest, 100*time.Millisecond), maxBackoff)
}

// refresh renews, before the call returns them, the granted leases whose
// first renewal is already due: a grant sent long before it took effect (a
// request that waited for a connection while the store was away, an earlier
// attempt with the same ID adopted) has its Deadline counted from that send,
// and would reach its holder with little of its TTL left, to be lost at the
// first slow renewal. Each comes back with its Deadline counted from the
// renewal. When one ended before it could be used (ErrLeaseExpired,
// ErrLeaseNotFound), the others are released and that error returned: the
// wait goes on for a new lease. A renewal that fails otherwise, or that the
// wait's end cuts off, leaves the leases as granted (their Held's renewals
// go on trying), and so does WithMaxHold, whose cap counts from the grant.
func (l *lockCall) refresh(leases []Lease) ([]Lease, error) {
	if l.cfg.maxHold > 0 {
		return leases, nil
	}
	for i, lease := range leases {
		if lease.Remaining() > l.ttl-l.cfg.interval {
			continue
		}
		// Within the wait (WithWaitTimeout): a store that went away again
		// does not hold the call past it.
		next, err := l.c.Renew(l.wctx, lease.Key, lease.ID, l.ttl, l.cfg.margin)
		switch {
		case err == nil:
			leases[i] = next
		case errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseNotFound):
			l.releaseOthers(leases, i)
			return nil, err
		default:
			return leases, nil
		}
	}
	return leases, nil
}

// releaseOthers releases every lease but the i-th, which ended: a wait for
// all the keys holds none of them while it waits. A release that fails
// leaves its lease to expire.
func (l *lockCall) releaseOthers(leases []Lease, i int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), l.ttl)
	defer cancel()
	for j, lease := range leases {
		if j != i {
			_ = l.c.Release(ctx, lease.Key, lease.ID)
		}
	}
}

// next takes the error of the grant sent at sent, and waits as it tells
// before the next attempt: nil to try again, or the call's error.
func (l *lockCall) next(err error, sent time.Time) error {
	var held *backend.HeldError
	var oe *OutcomeError
	took := time.Since(sent)
	if errors.As(err, &held) || definite(err) {
		l.slowest = max(l.slowest, took) // an answer
	}
	if l.wctx.Err() != nil && !definite(err) && (took >= maxBackoff || l.lastErr == nil && took >= l.unansweredAfter()) {
		// The wait ended during an attempt that the store had left
		// unanswered for a while (a client that waits for a connection,
		// etcd's, fails no sooner): the store is away. A short one
		// counts only when no attempt has said more (a refused dial).
		l.lastErr = &unansweredError{d: took, err: bareError(err)}
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
			return l.stop(l.giveUp(l.named(-1, err)))
		}
		l.set.last = time.Now()
		l.try = l.shuffled()
		return nil
	case errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseNotFound):
		// Only an attempt with this ID that took effect (its answer
		// lost, within send's resends or an earlier round) can be
		// answered so: that lease has ended since. Start afresh.
		l.lastErr = nil
		l.freshID()
		if err := l.set.pause(l.wctx); err != nil {
			return l.giveUp(l.named(-1, err))
		}
		l.try = l.shuffled()
		return nil
	case l.unknownSince.IsZero() && !errors.As(err, &oe):
		return l.giveUp(err)
	default:
		return l.stop(l.giveUp(err))
	}
}

// storeAway reports whether err, an attempt's error, is the store being
// away for a while (IsTransient) while the wait goes on, and if so keeps it
// as the last store error: the one the call's error wraps should the wait
// end before the store is back.
func (l *lockCall) storeAway(err error) bool {
	if l.wctx.Err() != nil || !IsTransient(err) {
		return false
	}
	l.lastErr = err
	return true
}

// waitRelease waits for the release of the live lease that refused the
// grant (err names its key; for LockAny, every key was refused). Another
// lease is live, so no earlier attempt of ours holds the key (its ID would
// have been answered with its lease): the next attempt is a new lease.
func (l *lockCall) waitRelease(err error, held *backend.HeldError) error {
	l.lastHeld = held
	l.freshID()
	if l.any {
		return l.waitKeys()
	}
	i := max(l.keyOf(err), 0)
	if _, ok := l.c.backend.(backend.Inspector); ok && l.cfg.fifo && l.need == lockOne {
		err = l.set.awaitFree(l.wctx, i)
	} else {
		l.set.refused(i, held)
		_, err = l.set.wait(l.wctx, []int{i})
	}
	if err != nil {
		return l.giveUp(opError("lock", l.keys[i], err))
	}
	return nil
}

// waitKeys is LockAny's wait once every key it could try was refused: for
// any of them to be announced free or due (keySet.wait), or with WithFIFO
// for the head of another line; the keys to try next go in try.
func (l *lockCall) waitKeys() error {
	var watch []int
	for i := range l.keys {
		if !l.cfg.fifo || l.set.keys[i].atHead {
			watch = append(watch, i)
		}
	}
	try, err := l.set.wait(l.wctx, watch)
	if err != nil {
		if l.wctx.Err() == nil {
			return l.giveUp(err) // a line's store error, naming its key
		}
		if l.cfg.fifo && l.lastHeld == nil && l.lastErr == nil {
			l.lastHeld = l.lineError() // at the head of no line
		}
		return l.giveUp(l.named(-1, l.wctx.Err()))
	}
	l.try = try
	return nil
}

// lineError is LockAny's last refusal when the wait ends before it heads
// any line: the fewest waiters ahead of it in one.
func (l *lockCall) lineError() error {
	l.set.haltTurns()
	ahead := -1
	for _, w := range l.set.keys {
		if w.ln != nil && (ahead < 0 || w.ln.ahead < ahead) {
			ahead = w.ln.ahead
		}
		if w.ln != nil && w.ln.lastErr != nil {
			l.lastErr = w.ln.lastErr
		}
	}
	if ahead < 0 {
		return nil
	}
	return &lineError{ahead: ahead}
}

// keyOf returns the index of the key err names, or -1.
func (l *lockCall) keyOf(err error) int {
	if ke := (*keyError)(nil); errors.As(err, &ke) {
		return slices.Index(l.keys, ke.key)
	}
	return -1
}

// named is err as the call's error, naming key i; i < 0 names the call's
// keys (Lock's and LockMany's: the first).
func (l *lockCall) named(i int, err error) error {
	if i < 0 && l.any {
		return &keysError{op: "lock any", keys: l.keys, err: err}
	}
	return opError("lock", l.keys[max(i, 0)], err)
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
	for _, h := range m.held {
		h.line = l.set.handOff(h.key)
	}
	return m
}

// hold starts the Held of the granted lease, and hands it the entry in the
// key's line, which it leaves at once so that the next waiter takes the
// head (LockAny leaves its other lines in close).
func (l *lockCall) hold(lease Lease) *Held {
	h := l.c.startHeld(l.ctx, lease, l.ttl, l.cfg.holdConfig)
	h.line = l.set.handOff(lease.Key)
	return h
}

// giveUp is the call's error once the wait ended (or failed) with err:
// when WithWaitTimeout ended it, an error that wraps the last refusal.
func (l *lockCall) giveUp(err error) error {
	i := l.keyOf(err)
	if l.lastErr != nil && l.wctx.Err() != nil {
		// The wait ended while the store was away: the error wraps the
		// wait's end and the store's last error.
		var waited time.Duration
		if l.timedOut() {
			waited = l.cfg.waitTimeout
		}
		return l.named(i, &awayError{waited: waited, end: l.wctx.Err(), last: bareError(l.lastErr)})
	}
	lastHeld := l.lastHeld
	if lastHeld == nil && i >= 0 && l.set.keys[i].seen != nil {
		lastHeld = l.set.keys[i].seen // a head of a line that saw the key held
	}
	if l.timedOut() && lastHeld != nil {
		return l.named(i, &waitError{waited: l.cfg.waitTimeout, err: lastHeld})
	}
	return err
}

// stop returns the call's error once it gives up, first releasing the
// lease an attempt with an unknown outcome may have taken.
func (l *lockCall) stop(err error) error {
	var oe *OutcomeError
	isOutcome := errors.As(err, &oe)
	if l.unknownSince.IsZero() && !isOutcome {
		return err // no attempt of ours may hold the key
	}
	if !isOutcome {
		oe = &OutcomeError{Op: "grant", Key: l.req.Key, LeaseID: l.req.LeaseID, Err: &unsettledError{last: err}}
		if l.need == lockAll {
			oe.Keys = l.keys
		}
	}
	return l.c.settle(l.ctx, oe, l.ttl)
}

// errTurnAhead is LockAny's last refusal when its wait ends before its
// turn among this Coordinator's waiters on the same keys (turns).
var errTurnAhead = fmt.Errorf("%w (this process's waiters on the same keys ahead)", ErrLeaseHeld)

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
