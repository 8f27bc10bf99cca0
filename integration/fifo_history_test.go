package integration_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
)

// A randomized history of one key's line: waiters join (each with a
// connection of its own), some give up (context canceled), some die (their
// connection cut) while they wait or while they hold the key, and each
// other one that gets the key holds it a moment and releases it. The checker then holds the history to the line's promises:
//
//   - at most one holder at a time: in token order, each grant comes after
//     the previous holder's release began;
//   - grants follow the join order among the waiters granted;
//   - no lost wake-up: once the key is free (the previous holder's release
//     began, or the waiter joined after it), the waiter granted next gets
//     it within wakeBound, unless a dead waiter's entry could still stand
//     ahead of it: then within that entry's TTL (and the lease's TTL and
//     margin, for a holder that died) and the store's slack, from the kill;
//   - every waiter that neither gave up nor died is granted.
//
// Lock polls only every 30s here, so a lost NotifyTurn is not covered up
// by a poll: only AheadRemaining (at most the entry TTL, which is longer
// than wakeBound) would wake such a waiter.

// historyTTL is the lease and entry TTL of the history's waiters. An
// entry renewed every third of it has at least two thirds left, longer
// than wakeBound: a waiter whose wake-up was lost, woken only by
// AheadRemaining, is late by more than wakeBound.
const historyTTL = 3 * time.Second

// wakeBound is how soon the next waiter must get a free key, not counting
// the time the store took to answer the releaser's and the waiter's calls
// (on a busy machine a SQLite write can wait seconds for the file's lock).
const wakeBound = 1500 * time.Millisecond

type histWaiter struct {
	n      int
	b      *watched
	calls  *timed // its calls to its store, under b
	joins  chan join
	cancel context.CancelFunc

	// guarded by history.mu
	joinedAt   time.Time
	state      string // "waiting", "granted", "done", "canceled", "killed"
	killedAt   time.Time
	canceledAt time.Time
	grant      *histGrant
	err        error
}

type histGrant struct {
	w            *histWaiter
	token        uint64
	at           time.Time // Lock returned
	releaseStart time.Time // zero: the holder died with the key
}

type history struct {
	t   *testing.T
	w   recipetest.World
	key string

	mu      sync.Mutex
	waiters []*histWaiter // in join order
	grants  []*histGrant  // as recorded; check sorts them by token
	wg      sync.WaitGroup
}

// join starts a waiter and returns once it is in line.
func (h *history) join(ctx context.Context) {
	t := h.t
	wt := &histWaiter{n: len(h.waiters), joins: make(chan join, 1), state: "waiting"}
	wt.calls = &timed{Backend: h.w.NewBackend(t)}
	inner := backend.Backend(wt.calls)
	var grants atomic.Int64
	wt.b = &watched{Backend: inner, q: inner.(backend.Queuer), grants: &grants, joins: wt.joins, seen: map[string]bool{}}
	c := fencing.New(wt.b, fencing.WithDefaultMargin(h.w.Margin))
	wctx, cancel := context.WithCancel(ctx)
	wt.cancel = cancel
	h.wg.Go(func() {
		held, err := c.Lock(wctx, h.key, historyTTL, fencing.WithFIFO(), fencing.WithPollInterval(30*time.Second))
		now := time.Now()
		h.mu.Lock()
		if err != nil {
			wt.err = err
			h.mu.Unlock()
			return
		}
		g := &histGrant{w: wt, token: held.Token(), at: now}
		wt.grant = g
		h.grants = append(h.grants, g)
		switch wt.state {
		case "killed": // cut as it was granted: it dies holding the key
			h.mu.Unlock()
			held.Release(context.Background()) // its connection is cut: the lease expires
			return
		case "canceled": // granted as it gave up: its Held ended with its context
			g.releaseStart = wt.canceledAt
			h.mu.Unlock()
			held.Release(context.Background())
			return
		}
		wt.state = "granted"
		h.mu.Unlock()
		time.Sleep(time.Duration(rand.N(5)) * time.Millisecond)
		h.mu.Lock()
		if wt.state == "killed" { // cut while it held the key: the lease expires
			h.mu.Unlock()
			held.Release(context.Background())
			return
		}
		g.releaseStart = time.Now()
		wt.state = "done"
		h.mu.Unlock()
		if err := held.Release(context.Background()); err != nil {
			// A release served after the lease's end finds nothing to
			// release; it can only have been, if it came back after the
			// holder's Deadline (the store's end is no earlier). A Held
			// whose Deadline passed before its release (the grant's answer
			// or the renewals slower than the lease) reports that loss.
			//
			// A release the store did not answer within the request
			// timeout (one SQLite file's writers take turns in its busy
			// handler, which lets a newcomer pass a waiter: on a loaded
			// host one can wait longer than that) leaves the lease to
			// expire: the next grant's check counts the release's time as
			// the store's (busyWithin), and the order check still holds.
			deadline := held.Lease().Deadline
			switch {
			case (errors.Is(err, fencing.ErrLeaseNotFound) || errors.Is(err, fencing.ErrLeaseExpired) || errors.Is(err, fencing.ErrLeaseLost)) && time.Now().After(deadline):
				t.Logf("waiter %d: Release came back %v after the lease's Deadline and found it ended (%v): a store slower than the lease", wt.n, time.Since(deadline), err)
			case errors.Is(err, fencing.ErrNoAnswer):
				t.Logf("waiter %d: Release was not answered (%v): the lease expires by itself", wt.n, err)
			default:
				t.Errorf("waiter %d: Release: %v", wt.n, err)
			}
		}
	})
	select {
	case <-wt.joins:
	case <-time.After(30 * time.Second):
		t.Fatalf("waiter %d did not join within 30s", wt.n)
	}
	h.mu.Lock()
	wt.joinedAt = time.Now()
	h.waiters = append(h.waiters, wt)
	h.mu.Unlock()
}

// pick returns a random waiter still waiting, or nil. The caller holds
// h.mu, so that the waiter's state cannot change before it acts on it.
func (h *history) pick() *histWaiter {
	var waiting []*histWaiter
	for _, wt := range h.waiters {
		if wt.state == "waiting" && wt.err == nil {
			waiting = append(waiting, wt)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	return waiting[rand.N(len(waiting))]
}

func (h *history) cancelOne() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if wt := h.pick(); wt != nil {
		wt.canceledAt = time.Now()
		wt.state = "canceled"
		wt.cancel()
	}
}

func (h *history) killOne() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if wt := h.pick(); wt != nil {
		wt.b.cut.Store(true)
		wt.killedAt = time.Now()
		wt.state = "killed"
	}
}

// killHolder cuts the connection of the waiter holding the key, if one
// does: its lease expires (and its entry, when its removal after the
// grant had not gone out yet).
func (h *history) killHolder() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, wt := range h.waiters {
		if wt.state == "granted" {
			wt.b.cut.Store(true)
			wt.killedAt = time.Now()
			wt.state = "killed"
			return true
		}
	}
	return false
}

// check holds the finished history to the line's promises.
func (h *history) check() {
	t := h.t
	h.mu.Lock()
	defer h.mu.Unlock()
	joinIndex := map[*histWaiter]int{}
	for i, wt := range h.waiters {
		joinIndex[wt] = i
	}
	// The store's grant order is the tokens' (the conformance suite holds
	// every backend to that); a holder that gave up as it was granted
	// records its grant late, so the order of recording proves nothing.
	slices.SortFunc(h.grants, func(a, b *histGrant) int { return cmp.Compare(a.token, b.token) })
	var order []int
	var worst time.Duration // the latest grant after its key was free to it
	for i, g := range h.grants {
		order = append(order, g.w.n)
		if i == 0 {
			continue
		}
		prev := h.grants[i-1]
		if g.token == prev.token {
			t.Errorf("waiters %d and %d were both granted token %d", prev.w.n, g.w.n, g.token)
		}
		if joinIndex[g.w] < joinIndex[prev.w] {
			// The line keeps a waiter's place while its entry is renewed
			// within its TTL: a store too slow for that (a loaded machine)
			// let it expire, and the waiter joined again at the end.
			if gap := g.w.calls.unrenewed(prev.at); gap > historyTTL {
				t.Logf("waiter %d (token %d) was granted before waiter %d (token %d), which joined before it: its entry went %v without a renewal (TTL %v), so it lost its place", prev.w.n, prev.token, g.w.n, g.token, gap, historyTTL)
			} else {
				t.Errorf("waiter %d (token %d) was granted before waiter %d (token %d), which joined before it (its entry renewed at most %v apart)", prev.w.n, prev.token, g.w.n, g.token, gap)
			}
		}
		// At most one holder: the next grant came after the previous
		// holder's release began (or, for one that died holding the key,
		// after its grant).
		end := later(prev.at, prev.releaseStart)
		if prev.w.state == "canceled" {
			// Granted as it gave up: its Held ended with its context,
			// releasing the key, maybe before its Lock returned to it.
			end = prev.releaseStart
		}
		if !g.at.After(end) {
			t.Errorf("waiter %d was granted (token %d) while waiter %d still held the key (token %d)", g.w.n, g.token, prev.w.n, prev.token)
		}
		// When the key became free for g.
		free := g.w.joinedAt
		if i > 0 {
			prev := h.grants[i-1]
			if prev.releaseStart.IsZero() { // died holding it: the lease expires
				free = later(free, prev.w.killedAt.Add(historyTTL+h.w.Margin+expirySlack(h.w)))
			} else {
				free = later(free, prev.releaseStart)
			}
		}
		// A dead waiter that joined before g may have stood ahead of it
		// until its entry expired.
		handoff := []*timed{g.w.calls, prev.w.calls}
		for _, wt := range h.waiters[:joinIndex[g.w]] {
			if !wt.killedAt.IsZero() && wt.killedAt.Before(g.at) {
				free = later(free, wt.killedAt.Add(historyTTL+expirySlack(h.w)))
			}
			// One that gave up leaves before its Lock returns: from then,
			// and its Dequeue is part of the handoff.
			if wt.grant == nil && !wt.canceledAt.IsZero() && wt.canceledAt.Before(g.at) {
				free = later(free, wt.canceledAt)
				handoff = append(handoff, wt.calls)
			}
			// One whose entry went longer than its TTL without a
			// renewal (its keeper waited on a loaded store) stood ahead
			// until the entry expired, and joined again at the end.
			if wt.grant == nil || wt.grant.token > g.token {
				if end := wt.calls.lapsed(g.at, historyTTL); !end.IsZero() {
					free = later(free, end.Add(expirySlack(h.w)))
					handoff = append(handoff, wt.calls)
				}
			}
		}
		// The time the store took over the handoff (the releaser's, the
		// next waiter's and, ahead of it, the leaving waiters' calls: on a
		// loaded machine a SQLite write waits seconds for the file) is not
		// a lost wake-up: count the rest.
		late := g.at.Sub(free)
		busy := busyWithin(free, g.at, handoff...)
		idle := late - busy
		worst = max(worst, idle)
		if idle > wakeBound {
			t.Errorf("waiter %d got the key %v after it was free to it, %v of it with no call to the store under way (bound %v): a lost wake-up", g.w.n, late, idle, wakeBound)
			for _, wt := range h.waiters[:joinIndex[g.w]+1] {
				t.Logf("  waiter %d: %s, joined %v, canceled %v, killed %v, err %v, granted %v", wt.n, wt.state,
					wt.joinedAt.Sub(g.at), since(wt.canceledAt, g.at), since(wt.killedAt, g.at), wt.err, wt.grant != nil)
			}
			if i > 0 {
				t.Logf("  previous grant: waiter %d at %v, release began %v", h.grants[i-1].w.n, h.grants[i-1].at.Sub(g.at), since(h.grants[i-1].releaseStart, g.at))
			}
		}
	}
	granted, killed, killedHolding := 0, 0, 0
	for _, wt := range h.waiters {
		if wt.state == "killed" {
			killed++
			if wt.grant != nil {
				killedHolding++
			}
		}
		switch {
		case wt.grant != nil:
			granted++
		case wt.state == "waiting":
			t.Errorf("waiter %d neither gave up nor died, and was never granted (Lock: %v)", wt.n, wt.err)
		case wt.state == "canceled" && !errors.Is(wt.err, context.Canceled):
			t.Errorf("canceled waiter %d: Lock returned %v, want context.Canceled", wt.n, wt.err)
		}
	}
	t.Logf("%s: %d waiters, %d granted in the order %v, %d killed (%d holding the key); the latest got a free key %v after it was free to it, besides its and the releaser's calls to the store",
		h.w.Name, len(h.waiters), granted, order, killed, killedHolding, worst)
}

// since is t relative to ref, or "-" when t is zero.
func since(t, ref time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(ref).String()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestLockFIFOHistory runs random histories of joins, cancels, kills and
// releases on every store, and checks each (see history).
func TestLockFIFOHistory(t *testing.T) {
	fifoWorlds(t, func(t *testing.T, w recipetest.World) {
		seed := rand.Uint64()
		t.Logf("seed %d", seed)
		r := rand.New(rand.NewPCG(seed, seed))
		h := &history{t: t, w: w, key: fmt.Sprintf("fifo-history-%d", seed%1000)}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		kills := 0
		for range 40 {
			switch x := r.IntN(100); {
			case x < 45:
				h.join(ctx)
			case x < 60:
				h.cancelOne()
			case x < 65 && kills < 2:
				h.killOne()
				kills++
			case x < 68 && kills < 2:
				if h.killHolder() {
					kills++
				}
			default:
				time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
			}
		}
		// Let the line drain: every live waiter is granted in turn, and releases.
		deadline := time.Now().Add(time.Minute)
		for {
			h.mu.Lock()
			pending := 0
			for _, wt := range h.waiters {
				if (wt.state == "waiting" && wt.err == nil) || wt.state == "granted" {
					pending++
				}
			}
			h.mu.Unlock()
			if pending == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, wt := range h.waiters {
			wt.cancel() // the dead ones' Locks end
		}
		h.wg.Wait()
		h.check()
	})
}

// timed is one waiter's store, recording when each of its calls ran and
// when each Enqueue that went through was sent.
type timed struct {
	backend.Backend
	mu       sync.Mutex
	calls    [][2]time.Time // start, end
	enqueues [][2]time.Time // start, end of each Enqueue that went through
}

func (b *timed) record(start time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, [2]time.Time{start, time.Now()})
}

func (b *timed) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	defer b.record(time.Now())
	return b.Backend.Grant(ctx, req)
}

func (b *timed) Release(ctx context.Context, key, id string) error {
	defer b.record(time.Now())
	return b.Backend.Release(ctx, key, id)
}

func (b *timed) Enqueue(ctx context.Context, key, waiter string, ttl time.Duration) (backend.Place, error) {
	start := time.Now()
	defer b.record(start)
	p, err := b.Backend.(backend.Queuer).Enqueue(ctx, key, waiter, ttl)
	if err == nil {
		b.mu.Lock()
		b.enqueues = append(b.enqueues, [2]time.Time{start, time.Now()})
		b.mu.Unlock()
	}
	return p, err
}

func (b *timed) Dequeue(ctx context.Context, key, waiter string) error {
	defer b.record(time.Now())
	return b.Backend.(backend.Queuer).Dequeue(ctx, key, waiter)
}

func (b *timed) NotifyTurn(ctx context.Context, key, waiter string) (backend.Subscription, error) {
	defer b.record(time.Now())
	return b.Backend.(backend.Queuer).NotifyTurn(ctx, key, waiter)
}

func (b *timed) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	defer b.record(time.Now())
	return b.Backend.(backend.Inspector).Inspect(ctx, key)
}

func (b *timed) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	defer b.record(time.Now())
	if n, ok := b.Backend.(backend.Notifier); ok {
		return n.NotifyFree(ctx, key)
	}
	return closedSub{}, nil
}

// unrenewed returns the longest time, up to until, that this waiter's entry
// may have gone without a renewal in the store: an Enqueue is served at some
// moment between its send and its answer, so two that went through may have
// been served as far apart as the first's send and the second's answer (on
// a loaded machine a call waits long for the store: one SQLite file's writers
// take turns).
func (b *timed) unrenewed(until time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var gap time.Duration
	for i, e := range b.enqueues {
		if !e[0].Before(until) {
			break
		}
		next := until
		if i+1 < len(b.enqueues) && b.enqueues[i+1][0].Before(until) {
			next = b.enqueues[i+1][1]
			if next.After(until) {
				next = until
			}
		}
		gap = max(gap, next.Sub(e[0]))
	}
	return gap
}

// lapsed returns the latest moment, before until, at which this waiter's
// entry may have expired for want of a renewal within ttl (an Enqueue is
// served at the latest when it is answered), or the zero time if it never
// went ttl without one.
func (b *timed) lapsed(until time.Time, ttl time.Duration) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var end time.Time
	for i, e := range b.enqueues {
		if !e[0].Before(until) {
			break
		}
		next := until
		if i+1 < len(b.enqueues) && b.enqueues[i+1][0].Before(until) {
			next = b.enqueues[i+1][1]
		}
		if next.Sub(e[0]) > ttl {
			if exp := e[1].Add(ttl); exp.Before(until) {
				end = later(end, exp)
			}
		}
	}
	return end
}

// busyWithin returns how much of [from, to] some call of these stores was
// under way.
func busyWithin(from, to time.Time, stores ...*timed) time.Duration {
	var spans [][2]time.Time
	for _, s := range stores {
		s.mu.Lock()
		for _, c := range s.calls {
			start, end := later(c[0], from), c[1]
			if end.After(to) {
				end = to
			}
			if end.After(start) {
				spans = append(spans, [2]time.Time{start, end})
			}
		}
		s.mu.Unlock()
	}
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var busy time.Duration
	var reach time.Time // the end of the union so far
	for _, sp := range spans {
		if sp[0].After(reach) {
			busy += sp[1].Sub(sp[0])
			reach = sp[1]
		} else if sp[1].After(reach) {
			busy += sp[1].Sub(reach)
			reach = sp[1]
		}
	}
	return busy
}
