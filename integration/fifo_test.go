package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/heldtest"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
	"github.com/fencing-go/fencing/memorybackend"
)

// Tests of Lock with WithFIFO over whole stores: each world's "processes"
// are Coordinators over backends (connections) of their own; on memory
// they share one backend, on its real clock so that entries expire in real
// time as on the servers.

// fifoWorlds runs f on every world whose backend keeps a line: memory (real
// clock), then, without -short, etcd, Redis, SQLite and PostgreSQL.
func fifoWorlds(t *testing.T, f func(t *testing.T, w recipetest.World)) {
	t.Run("memory", func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		f(t, recipetest.World{Name: "memory", TTL: time.Second, Margin: 500 * time.Millisecond,
			NewBackend: func(*testing.T) backend.Backend { return b }})
	})
	if testing.Short() {
		t.Log("-short: memory only")
		return
	}
	worlds := []struct {
		name string
		new  func(*testing.T) recipetest.World
	}{{"etcd", recipetest.Etcd}, {"redis", recipetest.Redis}, {"sqlite", recipetest.SQLite}, {"postgres", recipetest.Postgres}}
	for _, world := range worlds {
		t.Run(world.name, func(t *testing.T) {
			w := world.new(t)
			if _, ok := w.NewBackend(t).(backend.Queuer); !ok {
				t.Fatalf("the %s backend does not implement backend.Queuer", w.Name)
			}
			f(t, w)
		})
	}
}

// expirySlack is how long after an entry's TTL a world's store may take to
// let the waiter behind it through, on a busy machine: the waiter's look
// after AheadRemaining, a SQLite write queued behind others' polls, and on
// etcd the leader's revoke, up to 500ms late.
func expirySlack(w recipetest.World) time.Duration {
	if w.Name == "etcd" {
		return w.TTL + 500*time.Millisecond
	}
	return w.TTL
}

// errCut is what a process whose connection was cut gets.
var errCut = errors.New("connection cut (test)")

// watched wraps one process's backend: it counts grant attempts, reports
// each waiter's first place in the line, and can cut the connection.
type watched struct {
	backend.Backend
	q      backend.Queuer
	grants *atomic.Int64
	joins  chan<- join
	leaves chan<- string // each waiter whose entry a Dequeue removed
	cut    atomic.Bool
	// stall makes Dequeue wait for its context, as a server that does
	// not answer would.
	stall atomic.Bool
	// sawHeld, when set, is signalled each time a call finds the key
	// held: a grant refused with ErrLeaseHeld, or Inspect showing a live
	// lease.
	sawHeld chan struct{}
	// rtt delays each Release, as a server's round trip would: on memory,
	// it lets a waiter woken before the release finished try too soon.
	rtt time.Duration

	mu   sync.Mutex
	seen map[string]bool
}

// join is a waiter's first place in a line.
type join struct {
	waiter string
	place  backend.Place
}

func (b *watched) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if b.cut.Load() {
		return backend.Lease{}, errCut
	}
	b.grants.Add(1)
	l, err := b.Backend.Grant(ctx, req)
	if errors.Is(err, backend.ErrLeaseHeld) {
		b.held()
	}
	return l, err
}

func (b *watched) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if b.cut.Load() {
		return backend.Lease{}, errCut
	}
	return b.Backend.Renew(ctx, req)
}

func (b *watched) Release(ctx context.Context, key, id string) error {
	if b.cut.Load() {
		return errCut
	}
	time.Sleep(b.rtt)
	return b.Backend.Release(ctx, key, id)
}

func (b *watched) Enqueue(ctx context.Context, key, waiter string, ttl time.Duration) (backend.Place, error) {
	if b.cut.Load() {
		return backend.Place{}, errCut
	}
	p, err := b.q.Enqueue(ctx, key, waiter, ttl)
	if err == nil {
		b.mu.Lock()
		first := !b.seen[waiter]
		b.seen[waiter] = true
		b.mu.Unlock()
		if first {
			b.joins <- join{waiter, p}
		}
	}
	return p, err
}

func (b *watched) Dequeue(ctx context.Context, key, waiter string) error {
	if b.cut.Load() {
		return errCut
	}
	if b.stall.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	err := b.q.Dequeue(ctx, key, waiter)
	if err == nil && b.leaves != nil {
		select {
		case b.leaves <- waiter:
		default: // a test that does not read them
		}
	}
	return err
}

func (b *watched) NotifyTurn(ctx context.Context, key, waiter string) (backend.Subscription, error) {
	if b.cut.Load() {
		return nil, errCut
	}
	return b.q.NotifyTurn(ctx, key, waiter)
}

func (b *watched) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if b.cut.Load() {
		return backend.KeyState{}, errCut
	}
	st, err := b.Backend.(backend.Inspector).Inspect(ctx, key)
	if err == nil && st.Live {
		b.held()
	}
	return st, err
}

// held signals sawHeld, if set, without blocking.
func (b *watched) held() {
	if b.sawHeld != nil {
		select {
		case b.sawHeld <- struct{}{}:
		default:
		}
	}
}

func (b *watched) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	if n, ok := b.Backend.(backend.Notifier); ok {
		return n.NotifyFree(ctx, key)
	}
	return closedSub{}, nil // the store cannot notify: Lock polls
}

type closedSub struct{}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (closedSub) Freed() <-chan struct{} { return closed }
func (closedSub) Close() error           { return nil }

// procs is a world's processes, watched.
type procs struct {
	w      recipetest.World
	c      []*fencing.Coordinator
	b      []*watched
	grants atomic.Int64
	joins  chan join
	leaves chan string
}

func newProcs(t *testing.T, w recipetest.World, n int) *procs {
	p := &procs{w: w, joins: make(chan join, 256), leaves: make(chan string, 256)}
	for range n {
		inner := w.NewBackend(t)
		b := &watched{Backend: inner, q: inner.(backend.Queuer), grants: &p.grants, joins: p.joins, leaves: p.leaves, seen: map[string]bool{}}
		if w.Name == "memory" {
			b.rtt = time.Millisecond
		}
		p.b = append(p.b, b)
		p.c = append(p.c, fencing.New(b, fencing.WithDefaultMargin(w.Margin)))
	}
	return p
}

// joined waits for the next waiter to join, and returns its place.
func (p *procs) joined(t *testing.T) join {
	t.Helper()
	select {
	case j := <-p.joins:
		return j
	case <-time.After(30 * time.Second):
		t.Fatalf("no waiter joined the line within 30s")
		return join{}
	}
}

// leftLine waits until waiter's entry has been dequeued: a waiter that got
// the key leaves the line just after its Lock returned.
func (p *procs) leftLine(t *testing.T, waiter string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case w := <-p.leaves:
			if w == waiter {
				return
			}
		case <-timeout:
			t.Fatalf("the waiter did not leave the line within 30s")
		}
	}
}

// fifoGrants records grants in the order they happened.
type fifoGrants struct {
	mu     sync.Mutex
	order  []int
	tokens []uint64
	at     []time.Time
}

func (g *fifoGrants) add(i int, token uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.order = append(g.order, i)
	g.tokens = append(g.tokens, token)
	g.at = append(g.at, time.Now())
}

// runLine lets n waiters join key's line one after another, spread over
// the processes, while a holder that got the key through the line (and so
// left it) holds it; then the holder releases, and each waiter releases
// 2ms after it got the key.
// It returns the grants and how many grant attempts the handoffs took.
// Nobody dies here, so nothing waits for an expiry: the TTL (of the leases
// and of the entries) is long, so that a loaded store, slow to confirm a
// renewal, does not end a lease or an entry the test counts on.
func runLine(t *testing.T, p *procs, key string, n int, opts ...fencing.LockOption) (*fifoGrants, int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ttl := max(p.w.TTL, 30*time.Second)
	holder, err := p.c[0].Lock(ctx, key, ttl, opts...)
	if err != nil {
		t.Fatalf("first Lock: %v", err)
	}
	fifo := len(opts) > 0
	if fifo {
		j := p.joined(t)
		if j.place.Ahead != 0 {
			t.Fatalf("the holder joined at %+v, want the head", j.place)
		}
		p.leftLine(t, j.waiter)
	}
	log := &fifoGrants{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		c := p.c[(i+1)%len(p.c)]
		wg.Go(func() {
			h, err := c.Lock(ctx, key, ttl, opts...)
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			log.add(i, h.Token())
			time.Sleep(2 * time.Millisecond) // a short hold, as work would
			if err := h.Release(ctx); err != nil {
				errs <- fmt.Errorf("waiter %d: Release: %w", i, err)
			}
		})
		if fifo {
			// The next waiter starts once this one is in line.
			if j := p.joined(t); j.place.Ahead != i {
				t.Errorf("waiter %d joined at %+v, want Ahead %d", i, j.place, i)
			}
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	before := p.grants.Load()
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("holder's Release: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return log, p.grants.Load() - before
}

// checkGrants fails unless the waiters were granted 0, 1, ..., n-1 (when
// inOrder) with strictly increasing tokens.
func checkGrants(t *testing.T, log *fifoGrants, n int, inOrder bool) {
	t.Helper()
	if len(log.order) != n {
		t.Fatalf("%d grants, want %d", len(log.order), n)
	}
	if inOrder && !slices.Equal(log.order, slices.Collect(func(yield func(int) bool) {
		for i := range n {
			if !yield(i) {
				return
			}
		}
	})) {
		t.Fatalf("granted in the order %v, want the join order 0..%d", log.order, n-1)
	}
	for i := 1; i < n; i++ {
		if log.tokens[i] <= log.tokens[i-1] {
			t.Fatalf("tokens %v do not increase in grant order", log.tokens)
		}
	}
}

// TestLockFIFOOrder: 16 waiters in 4 processes, joining one after another,
// are granted in the order they joined.
func TestLockFIFOOrder(t *testing.T) {
	fifoWorlds(t, func(t *testing.T, w recipetest.World) {
		p := newProcs(t, w, 4)
		log, attempts := runLine(t, p, "fifo-order", 16, fencing.WithFIFO())
		checkGrants(t, log, 16, true)
		t.Logf("%s: 16 handoffs took %d grant attempts", w.Name, attempts)
	})
}

// TestLockFIFOOneAttemptPerHandoff: with 32 waiters, each handoff takes one
// grant attempt with WithFIFO (exactly, on memory); without it the figure
// is logged for comparison.
func TestLockFIFOOneAttemptPerHandoff(t *testing.T) {
	fifoWorlds(t, func(t *testing.T, w recipetest.World) {
		const n = 32
		p := newProcs(t, w, 4)
		log, fifo := runLine(t, p, "fifo-attempts", n, fencing.WithFIFO())
		checkGrants(t, log, n, true)
		log, plain := runLine(t, p, "plain-attempts", n)
		checkGrants(t, log, n, false)
		t.Logf("%s, %d waiters: grant attempts per handoff %.2f with WithFIFO, %.2f without",
			w.Name, n, float64(fifo)/n, float64(plain)/n)
		if w.Name == "memory" && fifo != n {
			t.Fatalf("%d handoffs took %d grant attempts with WithFIFO, want exactly one each", n, fifo)
		}
	})
}

// TestLockFIFOUnsupported: on a backend without a line, Lock with WithFIFO
// fails at once with an error wrapping errors.ErrUnsupported, even on a
// key that is free.
func TestLockFIFOUnsupported(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(struct{ backend.Backend }{mem}) // no optional capability
	ctx := context.Background()
	h, err := c.Lock(ctx, "k", time.Minute, fencing.WithFIFO())
	if !errors.Is(err, errors.ErrUnsupported) || h != nil {
		t.Fatalf("Lock with WithFIFO on a backend without a line = %v, %v; want an error wrapping errors.ErrUnsupported", h, err)
	}
	if _, live, _ := mem.Token(ctx, "k"); live {
		t.Fatalf("the failed Lock took the key")
	}
}

// deadWaiter has a holder take key through its line, then puts A, a victim
// and C in the line, each in a process of its own; join puts the victim in
// line (at Ahead 1, behind A) and
// returns how to kill it; the victim is killed, then the holder and A
// release. It returns how long after A's release, and after the kill, C
// got the key.
func deadWaiter(t *testing.T, p *procs, key string, join func(ctx context.Context) (kill func())) (afterRelease, afterKill time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ttl := p.w.TTL
	holder, err := p.c[0].Lock(ctx, key, ttl, fencing.WithFIFO())
	if err != nil {
		t.Fatalf("holder's Lock: %v", err)
	}
	p.leftLine(t, p.joined(t).waiter) // the holder got the key, so it left the line
	a := heldtest.LockAsync(ctx, p.c[1], key, ttl, fencing.WithFIFO())
	p.joined(t)
	kill := join(ctx)
	c := heldtest.LockAsync(ctx, p.c[3], key, ttl, fencing.WithFIFO())
	if j := p.joined(t); j.place.Ahead != 2 {
		t.Fatalf("C joined at %+v, want Ahead 2", j.place)
	}
	kill()
	killed := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("holder's Release: %v", err)
	}
	ra := heldtest.Result(t, a, "A")
	if ra.Err != nil {
		t.Fatalf("A's Lock: %v", ra.Err)
	}
	if err := ra.Held.Release(ctx); err != nil {
		t.Fatalf("A's Release: %v", err)
	}
	released := time.Now()
	rc := heldtest.Result(t, c, "C")
	if rc.Err != nil {
		t.Fatalf("C's Lock: %v", rc.Err)
	}
	if rc.Held.Token() <= ra.Held.Token() {
		t.Fatalf("C's token %d after A's %d", rc.Held.Token(), ra.Held.Token())
	}
	rc.Held.Release(ctx)
	return rc.At.Sub(released), rc.At.Sub(killed)
}

// victimHere is a victim in the test's own process 2, which kill ends
// (returning the victim's Lock's result if it read it).
func victimHere(t *testing.T, p *procs, key string, kill func(cancel context.CancelFunc, victim <-chan heldtest.LockResult) *heldtest.LockResult) func(ctx context.Context) func() {
	return func(ctx context.Context) func() {
		vctx, vcancel := context.WithCancel(ctx)
		victim := heldtest.LockAsync(vctx, p.c[2], key, p.w.TTL, fencing.WithFIFO())
		if j := p.joined(t); j.place.Ahead != 1 {
			t.Fatalf("the victim joined at %+v, want Ahead 1", j.place)
		}
		ended := make(chan heldtest.LockResult, 1)
		t.Cleanup(func() { // its Lock returns, without the key
			vcancel()
			select {
			case r := <-ended:
				if r.Err == nil {
					t.Errorf("the victim got the key (token %d)", r.Held.Token())
					r.Held.Release(context.Background())
				}
			case <-time.After(60 * time.Second):
				t.Errorf("the victim's Lock did not return within 60s")
			}
		})
		return func() {
			if r := kill(vcancel, victim); r != nil {
				ended <- *r
				return
			}
			go func() { ended <- <-victim }()
		}
	}
}

// TestLockFIFODeadWaiter: a waiter that gives up (its context canceled)
// leaves the line before its Lock returns, so it delays no one; one whose
// connection is cut (the store hears nothing more from it) or whose backend
// is closed delays the waiter behind it by at most its entry's TTL and the
// store's slack.
func TestLockFIFODeadWaiter(t *testing.T) {
	fifoWorlds(t, func(t *testing.T, w recipetest.World) {
		t.Run("canceled", func(t *testing.T) {
			p := newProcs(t, w, 4)
			const key = "fifo-canceled"
			after, _ := deadWaiter(t, p, key, victimHere(t, p, key, func(cancel context.CancelFunc, victim <-chan heldtest.LockResult) *heldtest.LockResult {
				cancel()
				r := heldtest.Result(t, victim, "the victim")
				if !errors.Is(r.Err, context.Canceled) {
					t.Fatalf("the canceled Lock returned %v, want context.Canceled", r.Err)
				}
				// It left the line before its Lock returned: its Dequeue
				// (the only one since the holder's; A and C still wait)
				// went through, so no one behind waits for its entry to
				// expire, however long the handoffs take on this host.
				select {
				case <-p.leaves:
				default:
					t.Fatalf("the canceled waiter's Lock returned before its entry left the line")
				}
				return &r
			}))
			t.Logf("%s: a canceled waiter, gone from the line, was followed by a handoff of %v (entry TTL %v)", w.Name, after, w.TTL)
		})
		hows := []string{"cut", "closed"}
		if w.Name == "memory" {
			hows = hows[:1] // its processes share one backend: closing it would end them all
		}
		for _, how := range hows {
			t.Run(how, func(t *testing.T) {
				p := newProcs(t, w, 4)
				key := "fifo-" + how
				after, afterKill := deadWaiter(t, p, key, victimHere(t, p, key, func(context.CancelFunc, <-chan heldtest.LockResult) *heldtest.LockResult {
					p.b[2].cut.Store(true)
					if how == "closed" {
						p.b[2].Backend.Close()
					}
					return nil
				}))
				t.Logf("%s: a waiter whose connection was %s delayed the next by %v after the release before it (%v after the kill; entry TTL %v)",
					w.Name, how, after, afterKill, w.TTL)
				if bound := w.TTL + expirySlack(w); afterKill > bound {
					t.Fatalf("the next waiter got the key %v after the kill, want at most the entry's TTL and slack, %v", afterKill, bound)
				}
			})
		}
	})
}

// TestLockFIFOWaitTimeout: WithWaitTimeout ends a wait in the line with an
// error wrapping ErrLeaseHeld that says how many waited ahead (or, at the
// head, the holder's time left), and the waiter has left the line when
// Lock returns.
func TestLockFIFOWaitTimeout(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	p := newProcs(t, recipetest.World{Name: "memory", TTL: time.Minute, NewBackend: func(*testing.T) backend.Backend { return mem }}, 3)
	ctx := context.Background()
	holder, err := p.c[0].Lock(ctx, "k", time.Minute, fencing.WithFIFO())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	p.leftLine(t, p.joined(t).waiter)
	_, err = p.c[1].Lock(ctx, "k", time.Minute, fencing.WithFIFO(), fencing.WithWaitTimeout(50*time.Millisecond))
	if !errors.Is(err, fencing.ErrLeaseHeld) || !strings.Contains(err.Error(), "gave up after waiting 50ms: key held by a live lease (for ") {
		t.Fatalf("Lock at the head past its wait timeout: %v, want ErrLeaseHeld with the holder's time left", err)
	}
	p.joined(t)
	head := heldtest.LockAsync(ctx, p.c[1], "k", time.Minute, fencing.WithFIFO())
	p.joined(t)
	_, err = p.c[2].Lock(ctx, "k", time.Minute, fencing.WithFIFO(), fencing.WithWaitTimeout(50*time.Millisecond))
	if !errors.Is(err, fencing.ErrLeaseHeld) || !strings.Contains(err.Error(), "gave up after waiting 50ms: key held by a live lease (1 waiter ahead in line)") {
		t.Fatalf("Lock in line past its wait timeout: %v, want ErrLeaseHeld with the waiters ahead", err)
	}
	p.joined(t)
	if place, err := mem.Enqueue(ctx, "k", "probe", time.Minute); err != nil || place.Ahead != 1 {
		t.Fatalf("a waiter joining after the timed-out ones: %+v, %v; want Ahead 1 (behind the waiting head alone)", place, err)
	}
	mem.Dequeue(ctx, "k", "probe")
	holder.Release(ctx)
	if r := heldtest.Result(t, head, "the head"); r.Err != nil {
		t.Fatalf("the head: %v", r.Err)
	} else {
		r.Held.Release(ctx)
	}
}

// TestLockFIFOReleaseBounded: Release's context bounds the Dequeue after
// the release, so a store that stops answering does not hold up Release
// for the request timeout.
func TestLockFIFOReleaseBounded(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	p := newProcs(t, recipetest.World{Name: "memory", TTL: time.Minute, NewBackend: func(*testing.T) backend.Backend { return mem }}, 1)
	h, err := p.c[0].Lock(context.Background(), "k", time.Minute, fencing.WithFIFO())
	if err != nil {
		t.Fatal(err)
	}
	p.b[0].stall.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Release took %v with a 100ms context: the Dequeue was not bounded by it", took)
	}
}

// TestLockFIFOAdvisoryLine: the line is advisory. A Hold, which does not
// wait in it, takes the key while it is free; the waiter at the head
// subscribes to the release, sees the key held, and gets the key when the
// Hold releases it, ahead of the waiter behind.
func TestLockFIFOAdvisoryLine(t *testing.T) {
	fifoWorlds(t, func(t *testing.T, w recipetest.World) {
		p := newProcs(t, w, 3)
		p.b[1].sawHeld = make(chan struct{}, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		outside, err := p.c[0].Hold(ctx, "advisory", w.TTL) // ignores the line
		if err != nil {
			t.Fatal(err)
		}
		head := heldtest.LockAsync(ctx, p.c[1], "advisory", w.TTL, fencing.WithFIFO())
		if j := p.joined(t); j.place.Ahead != 0 {
			t.Fatalf("the first waiter joined at %+v, want the head", j.place)
		}
		behind := heldtest.LockAsync(ctx, p.c[2], "advisory", w.TTL, fencing.WithFIFO())
		p.joined(t)
		// The head, subscribed to the release, has seen the key held and
		// waits: only the release can let it through.
		select {
		case <-p.b[1].sawHeld:
		case r := <-head:
			t.Fatalf("the head's Lock returned %v while the Hold was live", r)
		case <-ctx.Done():
			t.Fatal("the head never saw the key held")
		}
		if err := outside.Release(ctx); err != nil {
			t.Fatal(err)
		}
		rh := heldtest.Result(t, head, "the head")
		if rh.Err != nil {
			t.Fatalf("the head's Lock: %v", rh.Err)
		}
		select {
		case r := <-behind:
			t.Fatalf("the waiter behind got %v before the head released", r)
		case <-time.After(50 * time.Millisecond):
		}
		if err := rh.Held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		rb := heldtest.Result(t, behind, "the waiter behind")
		if rb.Err != nil {
			t.Fatalf("the waiter behind: %v", rb.Err)
		}
		if !(outside.Token() < rh.Held.Token() && rh.Held.Token() < rb.Held.Token()) {
			t.Fatalf("tokens %d, %d, %d, want increasing", outside.Token(), rh.Held.Token(), rb.Held.Token())
		}
		rb.Held.Release(ctx)
		// The Hold's grant, the head's refused one, its second after it
		// subscribed, its grant, the one of the waiter behind; on a store
		// that cannot notify, a poll or two more.
		n := p.grants.Load()
		t.Logf("%s: %d grant attempts in all", w.Name, n)
		if n > 8 {
			t.Fatalf("%d grant attempts: the head did not wait for the release", n)
		}
	})
}

// TestLockFIFOHeldEnds: the waiter at the head, waiting for the lease of
// the holder that went before (which left the line when it got the key),
// gets the key as soon as that lease ends without a Release: its parent
// context canceled (the Held releases), or forced out (announced to the
// waiter at once).
func TestLockFIFOHeldEnds(t *testing.T) {
	const ttl = 3 * time.Second
	for _, how := range []string{"canceled", "lost"} {
		t.Run(how, func(t *testing.T) {
			mem := memorybackend.New()
			defer mem.Close()
			p := newProcs(t, recipetest.World{Name: "memory", TTL: ttl, NewBackend: func(*testing.T) backend.Backend { return mem }}, 2)
			hctx, hcancel := context.WithCancel(context.Background())
			defer hcancel()
			holder, err := p.c[0].Lock(hctx, "k", ttl, fencing.WithFIFO())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release(context.Background())
			p.joined(t)
			next := heldtest.LockAsync(context.Background(), p.c[1], "k", ttl, fencing.WithFIFO())
			p.joined(t)
			ended := time.Now()
			if how == "canceled" {
				hcancel()
			} else if _, err := mem.ForceRelease(context.Background(), "k"); err != nil {
				t.Fatal(err) // the holder learns it at its next renewal, within ttl/3
			}
			r := heldtest.Result(t, next, "the next waiter")
			if r.Err != nil {
				t.Fatalf("the next waiter: %v", r.Err)
			}
			defer r.Held.Release(context.Background())
			took := r.At.Sub(ended)
			t.Logf("the next waiter got the key %v after the holder's Held ended (%s)", took, how)
			if took > ttl/3 {
				t.Fatalf("the next waiter got the key %v after the Held ended: it did not hear of the end (lease TTL %v)", took, ttl)
			}
		})
	}
}

// TestLockFIFOLeavesNoGoroutine: neither a Lock that gave up in the line
// nor a Held's Release leaves a goroutine of the line behind.
func TestLockFIFOLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	ctx := context.Background()
	holder, err := c.Lock(ctx, "k", time.Minute, fencing.WithFIFO())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(wctx, "k", time.Minute, fencing.WithFIFO()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock behind a holder, with a 50ms context: %v, want DeadlineExceeded", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}
