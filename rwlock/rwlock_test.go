package rwlock_test

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
	"github.com/fencing-go/fencing/internal/testing/rwtest"
	"github.com/fencing-go/fencing/rwlock"
)

type monitor = rwtest.Monitor

// TestInvariants: readers and writers in goroutines over three processes
// (a Coordinator each) take the lock again and again; the monitor checks
// every entry, readers are seen inside together, and a guard that admits
// the writers' tokens never refuses a writer or a reader's check.
func TestInvariants(t *testing.T) {
	worlds(t, func(t *testing.T, w world) {
		const procs, readers, writers, rounds = 3, 4, 2, 4
		var locks []*rwlock.RWLock
		for range procs {
			locks = append(locks, newLock(t, w.Coordinator(t), "inv", rwlock.WithReaders(3)))
		}
		rwtest.Invariants(t, locks, readers, writers, rounds, busyTTL(w, procs*(readers+writers)))
	})
}

// TestNoStarvation: holders of one kind take the lock without pause in
// goroutines of two processes, overlapping (readers) or one after another
// (writers); one holder of the other kind arrives and must get in after at
// most the stream's holders that were ahead of it in the turnstile's line.
// Each stream goroutine has at most one call under way when the arrival
// starts waiting, and may start one more before the arrival's place in
// line is taken; so at most 2 entries per stream goroutine come between
// the arrival's call and its entry. A lock that let the stream overtake
// the arrival would show as many entries as the stream makes: the test
// gives up once the stream has made ten times the bound.
func TestNoStarvation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string // "reader" or "writer"
	}{{"writer after readers", "reader"}, {"reader after writers", "writer"}} {
		t.Run(tc.name, func(t *testing.T) {
			worlds(t, func(t *testing.T, w world) {
				const procs, perProc = 2, 3
				ttl := busyTTL(w, procs*perProc+1)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				m := rwtest.NewMonitor(t)
				locks := []*rwlock.RWLock{newLock(t, w.Coordinator(t), "fair"), newLock(t, w.Coordinator(t), "fair")}
				var wg sync.WaitGroup
				defer wg.Wait()
				defer cancel()
				for p := range procs {
					for i := range perProc {
						who := fmt.Sprintf("p%d/%s%d", p, tc.stream, i)
						wg.Go(func() { stream(ctx, t, m, locks[p], ttl, tc.stream, who) })
					}
				}
				// Let the stream run: every goroutine in and out a few
				// times, and measure how long an entry of the stream takes.
				warm := time.Now()
				for m.Count() < 4*procs*perProc {
					time.Sleep(time.Millisecond)
				}
				perEntry := time.Since(warm) / time.Duration(m.Count())
				const bound = 2 * procs * perProc
				// A lock that let the stream overtake the arrival, or
				// deadlocked it, shows in the stream's entries or the
				// arrival's time: give up at ten times the bound, or ten
				// times as long as the bound's entries took in the warm-up
				// (plus two ttls: a pass that lost the turnstile waits again).
				limit := 10*bound*perEntry + 2*ttl
				var entered atomic.Bool
				before := m.Count()
				start := time.Now()
				wctx, wcancel := context.WithCancel(ctx)
				defer wcancel()
				go func() {
					for !entered.Load() && wctx.Err() == nil {
						if m.Count()-before > 10*bound || time.Since(start) > limit {
							wcancel()
						}
						time.Sleep(time.Millisecond)
					}
				}()
				var err error
				var token uint64
				var release func(context.Context) error
				leave := func() {}
				if tc.stream == "reader" {
					var wr *rwlock.Writer
					if wr, err = locks[0].Lock(wctx, ttl); err == nil {
						token, release, leave = wr.Token(), wr.Release, m.LeaveWriter
						m.EnterWriter("arriving writer", token)
					}
				} else {
					var r *rwlock.Reader
					if r, err = locks[0].RLock(wctx, ttl); err == nil {
						token, release, leave = r.Token(), r.Release, m.LeaveReader
						m.EnterReader("arriving reader", token)
					}
				}
				entered.Store(true)
				overtaken := m.Count() - before - 1
				if err != nil {
					t.Fatalf("the arrival did not get in after %d entries of the stream, %v (limit %v): %v", overtaken, time.Since(start), limit, err)
				}
				t.Logf("the arrival (token %d) got in after %d entries of the stream, %v", token, overtaken, time.Since(start))
				if overtaken > bound {
					t.Errorf("the arrival got in after %d entries of the stream; want at most %d", overtaken, bound)
				}
				leave()
				if err := release(context.Background()); err != nil {
					t.Errorf("Release: %v", err)
				}
			})
		})
	}
}

// stream takes the lock as kind ("reader" or "writer") again and again
// until ctx ends, holding it a few milliseconds each time.
func stream(ctx context.Context, t *testing.T, m *monitor, l *rwlock.RWLock, ttl time.Duration, kind, who string) {
	for ctx.Err() == nil {
		var err error
		if kind == "reader" {
			var r *rwlock.Reader
			if r, err = l.RLock(ctx, ttl); err == nil {
				m.EnterReader(who, r.Token())
				time.Sleep(5 * time.Millisecond)
				m.LeaveReader()
				err = r.Release(context.Background())
			}
		} else {
			var wr *rwlock.Writer
			if wr, err = l.Lock(ctx, ttl); err == nil {
				m.EnterWriter(who, wr.Token())
				time.Sleep(time.Millisecond)
				m.LeaveWriter()
				err = wr.Release(context.Background())
			}
		}
		if err != nil && ctx.Err() == nil {
			t.Errorf("%s: %v", who, err)
			return
		}
	}
}

// TestExpiredHolder: a holder whose process dies (its renewals and release
// never reach the store) blocks the others only until its leases expire:
// a dead reader inside, a dead writer inside. The dead holder's context
// ends by its Deadline.
func TestExpiredHolder(t *testing.T) {
	for _, dead := range []string{"reader", "writer"} {
		t.Run("dead "+dead, func(t *testing.T) {
			worlds(t, func(t *testing.T, w world) {
				d, db := rwtest.NewDying(w.NewBackend(t))
				e := rwtest.Expiry{Dead: dead, Die: d.Die, TTL: w.TTL, Margin: w.Margin,
					Dying: newLock(t, fencing.New(db, fencing.WithDefaultMargin(w.Margin)), "dies"),
					Live:  newLock(t, w.Coordinator(t), "dies")}
				if w.Clock != nil {
					// The store's time passes at twice the real rate: the
					// live holders' renewals (every third of the ttl, in
					// real time) keep up.
					e.Tick = func() { w.Clock.Advance(100 * time.Millisecond) }
				}
				rwtest.ExpiredHolder(t, e)
			})
		})
	}
}

// busyTTL is the ttl of the leases of holders goroutines contending on w:
// on a store that serializes its writes (SQLite), a renewal can wait behind
// the requests of every other goroutine, so the short ttl (w.TTL, fit for
// one holder) grows by one per three goroutines.
func busyTTL(w world, holders int) time.Duration {
	return w.TTL * time.Duration(max(1, holders/3))
}

// TestReadersShare: two readers are inside at once; a writer waits for
// both (its wait times out while they are inside) and gets in once they
// left, with a token above theirs; each holder's Context carries the lock's
// name and its token.
func TestReadersShare(t *testing.T) {
	worlds(t, func(t *testing.T, w world) {
		ctx := context.Background()
		l := newLock(t, w.Coordinator(t), "share")
		r1, err := l.RLock(ctx, w.TTL)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := l.RLock(ctx, w.TTL)
		if err != nil {
			t.Fatal(err)
		}
		if r2.Token() <= r1.Token() {
			t.Errorf("second reader's token %d is not above the first's %d", r2.Token(), r1.Token())
		}
		for i, r := range []*rwlock.Reader{r1, r2} {
			if res, tok, ok := guard.TokenFromContext(r.Context()); !ok || res != "share" || tok != r.Token() {
				t.Errorf("reader %d's context carries %q %d %v; want %q %d", i+1, res, tok, ok, "share", r.Token())
			}
		}
		_, err = l.Lock(ctx, w.TTL, fencing.WithWaitTimeout(100*time.Millisecond))
		if !errors.Is(err, fencing.ErrLeaseHeld) {
			t.Fatalf("Lock with two readers inside: %v; want a wait timeout wrapping ErrLeaseHeld", err)
		}
		if err := errors.Join(r1.Release(ctx), r2.Release(ctx)); err != nil {
			t.Fatal(err)
		}
		wr, err := l.Lock(ctx, w.TTL)
		if err != nil {
			t.Fatal(err)
		}
		defer wr.Release(ctx)
		if wr.Token() <= r2.Token() {
			t.Errorf("writer's token %d is not above the readers' %d, %d", wr.Token(), r1.Token(), r2.Token())
		}
		if res, tok, ok := guard.TokenFromContext(wr.Context()); !ok || res != "share" || tok != wr.Token() {
			t.Errorf("writer's context carries %q %d %v; want %q %d", res, tok, ok, "share", wr.Token())
		}
		if err := wr.Context().Err(); err != nil {
			t.Errorf("writer's context ended while held: %v", err)
		}
		leases := wr.Leases()
		if len(leases) != rwlock.DefaultReaders+1 || leases[0].Key != "share" || leases[0].Token != wr.Token() {
			t.Fatalf("writer's leases %+v: want the turnstile's (token %d), then %d slots'", leases, wr.Token(), rwlock.DefaultReaders)
		}
		for i, le := range leases[1:] {
			if want := fmt.Sprintf("share/r/%d", i); le.Key != want {
				t.Errorf("writer's lease %d is %q's, want %q's", i+1, le.Key, want)
			}
		}
	})
}

// TestNew: New refuses a bad name and a bad WithReaders before any request.
func TestNew(t *testing.T) {
	w := recipeMemory(t)
	c := w.Coordinator(t)
	if _, err := rwlock.New(c, ""); !errors.Is(err, fencing.ErrInvalidKey) {
		t.Errorf("New with an empty name: %v; want ErrInvalidKey", err)
	}
	for _, n := range []int{0, rwlock.MaxReaders + 1} {
		if _, err := rwlock.New(c, "x", rwlock.WithReaders(n)); !errors.Is(err, fencing.ErrInvalidOption) {
			t.Errorf("New with WithReaders(%d): %v; want ErrInvalidOption", n, err)
		}
	}
}

// noLine is a store without a line of waiters (no backend.Queuer), as
// kubebackend is: it passes on the other capabilities the lock uses.
type noLine struct {
	backend.Backend
	backend.Notifier
	backend.Inspector
	backend.MultiGranter
}

// TestNoLine: on a backend without a line the turnstile is taken without
// fencing.WithFIFO: readers still share the lock, a writer still waits for
// them, and tokens still follow the order holders pass.
func TestNoLine(t *testing.T) {
	w := recipeMemory(t)
	b := w.NewBackend(t)
	nb := noLine{b, b.(backend.Notifier), b.(backend.Inspector), b.(backend.MultiGranter)}
	if _, ok := any(nb).(backend.Queuer); ok {
		t.Fatal("the wrapper keeps a line")
	}
	ctx := context.Background()
	l := newLock(t, fencing.New(nb), "noline")
	r1, err := l.RLock(ctx, w.TTL)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.RLock(ctx, w.TTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(ctx, w.TTL, fencing.WithWaitTimeout(100*time.Millisecond)); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("Lock with two readers inside: %v; want a wait timeout wrapping ErrLeaseHeld", err)
	}
	if err := errors.Join(r1.Release(ctx), r2.Release(ctx)); err != nil {
		t.Fatal(err)
	}
	wr, err := l.Lock(ctx, w.TTL)
	if err != nil {
		t.Fatal(err)
	}
	if wr.Token() <= r2.Token() || r2.Token() <= r1.Token() {
		t.Errorf("tokens %d, %d, then the writer's %d: want them increasing", r1.Token(), r2.Token(), wr.Token())
	}
	if err := wr.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
