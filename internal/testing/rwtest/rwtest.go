// Package rwtest holds the tests of package rwlock that run on every
// backend, those in rwlock's own tests (recipetest's stores) and those of
// the backends in modules of their own (kubebackend, natsbackend): the
// invariants of readers and writers, and a dead holder's expiry.
package rwtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/testing/faultbackend"
	"github.com/fencing-go/fencing/rwlock"
)

// Monitor checks the lock's invariants as holders enter and leave: never
// a writer with anyone else; writers' tokens strictly increase; a reader's
// token is above the token of every writer that entered before it, and a
// writer's above every reader's that entered before it.
type Monitor struct {
	t  *testing.T
	mu sync.Mutex

	readers, writers int
	lastWriter       uint64 // the latest writer's token
	maxReader        uint64 // the highest reader's token so far
	mostReaders      int    // the most readers seen inside at once
	entries          int    // holders that entered so far
}

// NewMonitor returns a Monitor that reports to t.
func NewMonitor(t *testing.T) *Monitor { return &Monitor{t: t} }

// EnterReader records that the reader who entered with token.
func (m *Monitor) EnterReader(who string, token uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writers > 0 {
		m.t.Errorf("%s: reader (token %d) entered with a writer inside", who, token)
	}
	if token <= m.lastWriter {
		m.t.Errorf("%s: reader token %d is not above the previous writer's %d", who, token, m.lastWriter)
	}
	m.readers++
	m.entries++
	m.mostReaders = max(m.mostReaders, m.readers)
	m.maxReader = max(m.maxReader, token)
}

// LeaveReader records that a reader left.
func (m *Monitor) LeaveReader() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readers--
}

// EnterWriter records that the writer who entered with token.
func (m *Monitor) EnterWriter(who string, token uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writers > 0 || m.readers > 0 {
		m.t.Errorf("%s: writer (token %d) entered with %d writers and %d readers inside", who, token, m.writers, m.readers)
	}
	if token <= m.lastWriter || token <= m.maxReader {
		m.t.Errorf("%s: writer token %d is not above the previous writer's %d and every earlier reader's (highest %d)", who, token, m.lastWriter, m.maxReader)
	}
	m.writers++
	m.entries++
	m.lastWriter = token
}

// LeaveWriter records that the writer left.
func (m *Monitor) LeaveWriter() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writers--
}

// Count returns how many holders entered so far.
func (m *Monitor) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.entries
}

// MostReaders returns the most readers seen inside at once.
func (m *Monitor) MostReaders() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mostReaders
}

// Invariants: readers and writers in goroutines over the processes' locks
// (one RWLock on one name per process, each on a Coordinator of its own)
// take the lock rounds times each; the Monitor checks every entry, readers
// must be seen inside together, and a guard that admits the writers' tokens
// never refuses a writer or a reader's check. It returns the Monitor.
func Invariants(t *testing.T, locks []*rwlock.RWLock, readers, writers, rounds int, ttl time.Duration) *Monitor {
	ctx := context.Background()
	m := NewMonitor(t)
	g := guard.NewMemory()
	var wg sync.WaitGroup
	for p, l := range locks {
		for i := range readers {
			who := fmt.Sprintf("p%d/reader%d", p, i)
			wg.Go(func() {
				for range rounds {
					r, err := l.RLock(ctx, ttl)
					if err != nil {
						t.Errorf("%s: RLock: %v", who, err)
						return
					}
					m.EnterReader(who, r.Token())
					if f := g.Fence(l.Name()); f > r.Token() {
						t.Errorf("%s: reader token %d below the guard's fence %d", who, r.Token(), f)
					}
					time.Sleep(5 * time.Millisecond)
					m.LeaveReader()
					if err := r.Release(ctx); err != nil {
						t.Errorf("%s: Release: %v", who, err)
					}
				}
			})
		}
		for i := range writers {
			who := fmt.Sprintf("p%d/writer%d", p, i)
			wg.Go(func() {
				for range rounds {
					wr, err := l.Lock(ctx, ttl)
					if err != nil {
						t.Errorf("%s: Lock: %v", who, err)
						return
					}
					m.EnterWriter(who, wr.Token())
					if err := g.Write(wr.Context(), l.Name(), wr.Token(), func() error { time.Sleep(time.Millisecond); return nil }); err != nil {
						t.Errorf("%s: guarded write: %v", who, err)
					}
					m.LeaveWriter()
					if err := wr.Release(ctx); err != nil {
						t.Errorf("%s: Release: %v", who, err)
					}
				}
			})
		}
	}
	wg.Wait()
	if want := len(locks) * (readers + writers) * rounds; m.Count() != want {
		t.Errorf("%d entries; want %d", m.Count(), want)
	}
	t.Logf("%d entries, up to %d readers at once", m.Count(), m.MostReaders())
	return m
}

// ErrDead is what a dead process's store calls return: they never left.
var ErrDead = errors.New("the process is dead (test)")

// Dying is a process's backend that can die: from then on its renewals and
// releases never reach the store (as after kill -9, or a SIGSTOP longer than
// the leases), so its leases end only by expiry.
type Dying struct {
	*faultbackend.Backend
	dead atomic.Bool
}

// dyingMany is a Dying whose store grants many keys at once.
type dyingMany struct {
	*Dying
	many backend.MultiGranter
}

func (d dyingMany) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	return d.many.GrantMany(ctx, reqs)
}

// NewDying wraps b; the backend it returns is a backend.MultiGranter when
// b is one. Die kills it.
func NewDying(b backend.Backend) (*Dying, backend.Backend) {
	pass := func(_ context.Context, _ faultbackend.Op, _ string, err error) error { return err }
	d := &Dying{Backend: faultbackend.New(b, pass)}
	if m, ok := b.(backend.MultiGranter); ok {
		return d, dyingMany{d, m}
	}
	return d, d
}

// Die ends the process: no renewal or release reaches the store from now.
func (d *Dying) Die() { d.dead.Store(true) }

// Renew implements backend.Backend.
func (d *Dying) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if d.dead.Load() {
		return backend.Lease{}, fmt.Errorf("renew: %w", ErrDead)
	}
	return d.Backend.Renew(ctx, req)
}

// Release implements backend.Backend.
func (d *Dying) Release(ctx context.Context, key, leaseID string) error {
	if d.dead.Load() {
		return fmt.Errorf("release: %w", ErrDead)
	}
	return d.Backend.Release(ctx, key, leaseID)
}

// Expiry is a dead holder's case for ExpiredHolder.
type Expiry struct {
	Dead string // "reader" or "writer": the holder that dies
	// Waiter is the kind that waits for it: "reader" or "writer"; ""
	// for the other kind.
	Waiter string
	Dying  *rwlock.RWLock // the lock on the Dying's Coordinator
	Die    func()         // kills the Dying
	Live   *rwlock.RWLock // the lock on a live process's Coordinator
	TTL    time.Duration
	// Margin is the dying Coordinator's margin.
	Margin time.Duration
	// Tick, when not nil, is called every 50 ms while the live process
	// waits (to move a fake clock).
	Tick func()
}

// ExpiredHolder: a holder whose process dies (its renewals and release
// never reach the store) blocks the others only until its leases expire.
// The waiter is of the other kind (a writer waits for the dead reader, a
// reader for the dead writer) unless e.Waiter says; it gets a token above the dead holder's,
// and the dead holder's context ends by its Deadline. It returns how long
// the waiter waited from the death.
func ExpiredHolder(t *testing.T, e Expiry) time.Duration {
	t.Helper()
	ctx := context.Background()
	var done <-chan struct{}
	var deadToken uint64
	if e.Dead == "reader" {
		r, err := e.Dying.RLock(ctx, e.TTL)
		if err != nil {
			t.Fatal(err)
		}
		done, deadToken = r.Done(), r.Token()
	} else {
		wr, err := e.Dying.Lock(ctx, e.TTL)
		if err != nil {
			t.Fatal(err)
		}
		done, deadToken = wr.Done(), wr.Token()
	}
	e.Die()
	start := time.Now()
	type entry struct {
		token   uint64
		release func(context.Context) error
		err     error
	}
	got := make(chan entry, 1)
	if e.Waiter == "" {
		e.Waiter = map[string]string{"reader": "writer", "writer": "reader"}[e.Dead]
	}
	go func() {
		opts := []fencing.LockOption{fencing.WithPollInterval(fencing.MinPollInterval), fencing.WithWaitTimeout(time.Minute)}
		if e.Waiter == "writer" {
			wr, err := e.Live.Lock(ctx, e.TTL, opts...)
			if err != nil {
				got <- entry{err: err}
				return
			}
			got <- entry{token: wr.Token(), release: wr.Release}
			return
		}
		r, err := e.Live.RLock(ctx, e.TTL, opts...)
		if err != nil {
			got <- entry{err: err}
			return
		}
		got <- entry{token: r.Token(), release: r.Release}
	}()
	var in entry
wait:
	for {
		select {
		case in = <-got:
			break wait
		case <-time.After(50 * time.Millisecond):
			if e.Tick != nil {
				e.Tick()
			}
		}
	}
	waited := time.Since(start)
	if in.err != nil {
		t.Fatalf("the waiter behind the dead %s: %v", e.Dead, in.err)
	}
	t.Logf("the waiter got in %v after the %s died (ttl %v, margin %v)", waited, e.Dead, e.TTL, e.Margin)
	if err := in.release(ctx); err != nil {
		t.Errorf("the waiter's Release: %v", err)
	}
	if in.token <= deadToken {
		t.Errorf("the waiter's token %d is not above the dead %s's %d", in.token, e.Dead, deadToken)
	}
	select {
	case <-done:
	case <-time.After(2 * (e.TTL + e.Margin)):
		t.Errorf("the dead %s's context did not end within twice its ttl and margin", e.Dead)
	}
	return waited
}

// NewLock returns the lock named name on a Coordinator over b with margin.
func NewLock(t *testing.T, b backend.Backend, margin time.Duration, name string, opts ...rwlock.Option) *rwlock.RWLock {
	t.Helper()
	l, err := rwlock.New(fencing.New(b, fencing.WithDefaultMargin(margin)), name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ReadersOnly is for a backend that grants no several keys at once (no
// backend.MultiGranter) and keeps no line of waiters (no backend.Queuer),
// procs being backends of three or more processes on one store: a writer's
// Lock fails with errors.ErrUnsupported and takes nothing; readers of
// every process pass with tokens that follow the order they pass in
// (Invariants, no writers), two readers are inside at once, and a reader
// still gets in (within limit) after the refused writer. Fairness is not
// promised without a line and is not tested.
func ReadersOnly(t *testing.T, procs []backend.Backend, ttl, margin, limit time.Duration) {
	ctx := context.Background()
	var locks []*rwlock.RWLock
	for _, b := range procs {
		locks = append(locks, NewLock(t, b, margin, "rw", rwlock.WithReaders(3)))
	}
	start := time.Now()
	Invariants(t, locks, 3, 0, 3, ttl)
	t.Logf("invariants took %v", time.Since(start))
	r1, err := locks[0].RLock(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := locks[1].RLock(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Token() <= r1.Token() {
		t.Errorf("second reader's token %d is not above the first's %d", r2.Token(), r1.Token())
	}
	if _, err := locks[2].Lock(ctx, ttl, fencing.WithWaitTimeout(time.Second)); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Lock: %v; want errors.ErrUnsupported", err)
	}
	if err := errors.Join(r1.Release(ctx), r2.Release(ctx)); err != nil {
		t.Fatal(err)
	}
	r3, err := locks[2].RLock(ctx, ttl, fencing.WithWaitTimeout(limit))
	if err != nil {
		t.Fatalf("a reader after the refused writer: %v", err)
	}
	if r3.Token() <= r2.Token() {
		t.Errorf("third reader's token %d is not above the second's %d", r3.Token(), r2.Token())
	}
	if err := r3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// ExpiredReader: on two processes' backends of a store with observed
// expiry (backend.ObservedExpiry), a dead reader in the only slot holds up
// the next reader for at least ttl (its slot was granted before it died)
// and at most limit (the live process must see it unchanged for ttl +
// margin from its first read, after the death); the next reader's token is
// above the dead one's.
func ExpiredReader(t *testing.T, procs []backend.Backend, ttl, margin, limit time.Duration) {
	d, db := NewDying(procs[0])
	waited := ExpiredHolder(t, Expiry{Dead: "reader", Waiter: "reader", Die: d.Die, TTL: ttl, Margin: margin,
		Dying: NewLock(t, db, margin, "dies", rwlock.WithReaders(1)), Live: NewLock(t, procs[1], margin, "dies", rwlock.WithReaders(1))})
	if waited < ttl || waited > limit {
		t.Errorf("the waiter got in %v after the death; want within [%v, %v]", waited, ttl, limit)
	}
}
