package election_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/election"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/faultbackend"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
	"github.com/fencing-go/fencing/memorybackend"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// observer collects what Observe yields until stop is called.
type observer struct {
	mu     sync.Mutex
	seen   []election.Leader
	first  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func observe(t *testing.T, e *election.Election) *observer {
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{first: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for l, err := range e.Observe(ctx) {
			if err != nil {
				t.Errorf("Observe: %v", err)
				continue
			}
			o.mu.Lock()
			o.seen = append(o.seen, l)
			if len(o.seen) == 1 {
				close(o.first)
			}
			o.mu.Unlock()
		}
	}()
	select {
	case <-o.first:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe yielded nothing in 10s")
	}
	return o
}

// await waits until what Observe yielded so far satisfies cond, and
// reports whether it did within bound.
func (o *observer) await(bound time.Duration, cond func(seen []election.Leader) bool) bool {
	for end := time.Now().Add(bound); ; time.Sleep(time.Millisecond) {
		o.mu.Lock()
		ok := cond(o.seen)
		o.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

func (o *observer) stop() []election.Leader {
	o.cancel()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen
}

// TestOneLeaderAtATime: of 2 and 5 candidates campaigning again and again,
// exactly one leads at any instant (each leader finds the backend naming it,
// and no other candidate leading), every term has its own, larger token,
// and Observe reports every term, in order, with a vacancy before the first.
func TestOneLeaderAtATime(t *testing.T) {
	worlds(t, func(t *testing.T, w world) {
		for _, n := range []int{2, 5} {
			t.Run(fmt.Sprintf("%d candidates", n), func(t *testing.T) {
				key := fmt.Sprintf("leader-%d", n)
				// A term lasts until Observe has reported it, which on SQLite
				// queues behind the waiters' polls, as the term's renewals
				// do: a TTL of several short ones keeps it renewed meanwhile
				// (a resignation ends it, so its length costs nothing).
				ttl := 5 * w.TTL
				o := observe(t, election.New(w.Coordinator(t), key, ttl, election.WithObserveInterval(10*time.Millisecond)))
				var (
					mu     sync.Mutex
					terms  []uint64
					active atomic.Int32
					wg     sync.WaitGroup
				)
				target := 3 * n
				ctx := context.Background()
				for i := range n {
					e := election.New(w.Coordinator(t), key, ttl, election.WithLockOptions(holdOpts()...))
					id := fmt.Sprintf("candidate-%d", i)
					wg.Go(func() {
						for {
							mu.Lock()
							enough := len(terms) >= target
							mu.Unlock()
							if enough {
								return
							}
							h, err := e.Campaign(ctx, id)
							if err != nil {
								t.Errorf("%s: Campaign: %v", id, err)
								return
							}
							if a := active.Add(1); a != 1 {
								t.Errorf("%s leads with %d others leading", id, a-1)
							}
							mu.Lock()
							terms = append(terms, h.Token())
							mu.Unlock()
							l, err := e.Leader(ctx)
							if err != nil || !l.Live || l.Identity != id || l.Token != h.Token() {
								t.Errorf("%s leads with token %d, but Leader = %+v, %v", id, h.Token(), l, err)
							}
							// The term lasts until Observe has reported it: a
							// term shorter than Observe's read may be missed.
							if !o.await(10*time.Second, func(seen []election.Leader) bool {
								return slices.ContainsFunc(seen, func(l election.Leader) bool { return l.Live && l.Token == h.Token() })
							}) {
								t.Errorf("%s: Observe did not report term %d within 10s", id, h.Token())
							}
							active.Add(-1)
							if err := h.Release(ctx); err != nil {
								t.Errorf("%s: resign: %v", id, err)
							}
						}
					})
				}
				wg.Wait()
				last := terms[len(terms)-1]
				o.await(10*time.Second, func(seen []election.Leader) bool { // the last vacancy
					l := seen[len(seen)-1]
					return !l.Live && l.LastToken == last
				})
				seen := o.stop()
				if !slices.IsSorted(terms) || len(slices.Compact(slices.Clone(terms))) != len(terms) {
					t.Fatalf("term tokens %v: want strictly increasing", terms)
				}
				var observed []uint64
				for i, l := range seen {
					if i == 0 && l.Live {
						t.Errorf("Observe's first state %+v, want the vacancy before any campaign", l)
					}
					if l.Live {
						observed = append(observed, l.Token)
						if l.Identity == "" {
							t.Errorf("Observe: term %d without an identity", l.Token)
						}
					}
				}
				if !slices.Equal(observed, terms) {
					t.Errorf("Observe saw terms %v, want %v", observed, terms)
				}
				if l := seen[len(seen)-1]; l.Live || l.LastToken != last {
					t.Errorf("Observe's last state %+v, want the vacancy after term %d", l, last)
				}
			})
		}
	})
}

// TestTakeoverAfterStall: a leader that stops renewing (memory: its
// coordinator's clock jumps past the term; etcd: every byte to the server
// held by a proxy; SQL: its requests held before they reach the store) loses the office to a waiting candidate, whose term has
// a larger token; the stalled leader's guarded write with its old token is
// refused once the new leader has admitted its own; and the stalled leader's
// term context ends.
func TestTakeoverAfterStall(t *testing.T) {
	worlds(t, func(t *testing.T, w world) {
		if w.Name == "redis" {
			t.Log("Redis: TestTakeoverRedisSIGSTOP stops a leader's process instead")
			return
		}
		ctx := context.Background()
		leaderCoord := w.Coordinator(t)
		var stall, resume func()
		switch w.Name {
		case "memory":
			stall = func() { w.Clock.Advance(w.TTL + 2*time.Second) }
			resume = func() {}
		case "etcd":
			p := etcdtest.StartProxy(t, w.Etcd.ClientURL)
			leaderCoord = fencing.New(recipetest.EtcdBackend(t, p.Endpoints(), w.Prefix), fencing.WithDefaultMargin(w.Margin))
			stall = func() { p.SetMode(etcdtest.Pause) }
			resume = func() { p.SetMode(etcdtest.Forward) }
		default: // sqlite, postgres: the leader's requests held before they reach the store
			sb := recipetest.NewStallable(w.NewBackend(t))
			leaderCoord = fencing.New(sb, fencing.WithDefaultMargin(w.Margin))
			stall, resume = sb.Stall, sb.Resume
		}
		old := election.New(leaderCoord, "office", w.TTL, election.WithLockOptions(holdOpts()...))
		// The successor's process signals each grant refused for the
		// leader's live term.
		refused := make(chan struct{}, 1)
		nextBackend := faultbackend.New(w.NewBackend(t), func(_ context.Context, op faultbackend.Op, _ string, err error) error {
			if op == faultbackend.Grant && errors.Is(err, backend.ErrLeaseHeld) {
				select {
				case refused <- struct{}{}:
				default:
				}
			}
			return err
		})
		next := election.New(fencing.New(nextBackend, fencing.WithDefaultMargin(w.Margin)), "office", w.TTL, election.WithLockOptions(holdOpts()...))
		a, err := old.Campaign(ctx, "stalled")
		if err != nil {
			t.Fatal(err)
		}
		g := guard.NewMemory()
		if err := g.Write(ctx, "resource", a.Token(), func() error { return nil }); err != nil {
			t.Fatalf("the leader's first write: %v", err)
		}
		won := make(chan *fencing.Held, 1)
		go func() {
			h, err := next.Campaign(ctx, "successor")
			if err != nil {
				t.Errorf("successor: Campaign: %v", err)
			}
			won <- h
		}()
		select { // the successor was refused and waits
		case <-refused:
		case <-won:
			t.Fatal("the successor won while the leader was live")
		case <-time.After(time.Minute):
			t.Fatal("the successor's campaign was never refused")
		}
		stall()
		var b *fencing.Held
		select {
		case b = <-won:
		case <-time.After(10 * w.TTL):
			t.Fatalf("no takeover %v after the leader stalled", 10*w.TTL)
		}
		if b == nil {
			return
		}
		defer b.Release(ctx)
		if b.Token() <= a.Token() {
			t.Fatalf("successor's token %d, not above the stalled leader's %d", b.Token(), a.Token())
		}
		if err := g.Admit(ctx, "resource", b.Token()); err != nil {
			t.Fatalf("successor's Admit: %v", err)
		}
		l, err := next.Leader(ctx)
		if err != nil || !l.Live || l.Identity != "successor" || l.Token != b.Token() {
			t.Fatalf("Leader after the takeover = %+v, %v", l, err)
		}
		resume()
		// The stalled leader resumes and writes with the token it had.
		err = g.Write(ctx, "resource", a.Token(), func() error {
			t.Error("the stalled leader's write ran")
			return nil
		})
		if !errors.Is(err, guard.ErrStaleToken) {
			t.Fatalf("the stalled leader's write: %v, want ErrStaleToken", err)
		}
		select {
		case <-a.Done():
		case <-time.After(10 * w.TTL):
			t.Fatal("the stalled leader's term context did not end")
		}
		if err := a.Release(ctx); !errors.Is(err, fencing.ErrLeaseLost) {
			t.Errorf("the stalled leader's resign: %v, want ErrLeaseLost", err)
		}
		// Its late resign did not end the successor's term.
		if l, err := next.Leader(ctx); err != nil || l.Token != b.Token() {
			t.Fatalf("Leader after the stalled leader's resign = %+v, %v; want term %d", l, err, b.Token())
		}
	})
}

// TestRunWaitsForLead: after a loss, Run cancels lead's context and does
// not campaign again (the office stays vacant) until lead returns; it never
// runs two leads at once; when its context ends it waits for lead and then
// resigns at once, without the term expiring.
func TestRunWaitsForLead(t *testing.T) {
	worlds(t, func(t *testing.T, w world) {
		c := w.Coordinator(t)
		e := election.New(c, "run", w.TTL, election.WithLockOptions(holdOpts()...))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const linger = 300 * time.Millisecond
		var (
			running atomic.Int32
			terms   = make(chan fencing.Lease, 10)
			ended   = make(chan time.Time, 10)
		)
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, "runner", func(lctx context.Context, term fencing.Lease) error {
				if n := running.Add(1); n != 1 {
					t.Errorf("%d leads at once", n)
				}
				terms <- term
				<-lctx.Done()
				time.Sleep(linger) // the work takes a while to stop
				running.Add(-1)
				ended <- time.Now()
				return lctx.Err()
			})
		}()
		first := <-terms
		// Break the term: the renewal is refused, the term is lost.
		if ended, err := c.ForceRelease(context.Background(), "run"); err != nil || !ended {
			t.Fatalf("ForceRelease = %v, %v", ended, err)
		}
		var lostAt time.Time
		select {
		case lostAt = <-ended:
		case <-time.After(10 * w.TTL):
			t.Fatal("lead did not return after the loss")
		}
		second := <-terms
		if second.Token <= first.Token {
			t.Fatalf("second term's token %d, not above %d", second.Token, first.Token)
		}
		// The second term began after the first lead returned (the key
		// stayed free while it lingered): its Deadline is its grant's send
		// time plus the TTL asked for.
		if began := second.Deadline.Add(-w.TTL); began.Before(lostAt) {
			t.Errorf("second term began %v before the first lead returned", lostAt.Sub(began))
		}
		cancel()
		select {
		case <-ended:
		case <-time.After(10 * w.TTL):
			t.Fatal("lead did not return after ctx ended")
		}
		// While lead lingered, the term stayed live: Run resigns after it.
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
		l, err := e.Leader(context.Background())
		if err != nil || l.Live {
			t.Errorf("Leader after Run returned = %+v, %v; want a vacancy (resigned, not expired)", l, err)
		}
	})
}

// TestRunResignsAfterLead: when ctx ends, the term stays live until lead
// returns, and is vacant as soon as Run returns.
func TestRunResignsAfterLead(t *testing.T) {
	worlds(t, func(t *testing.T, w world) {
		e := election.New(w.Coordinator(t), "resign", w.TTL, election.WithLockOptions(holdOpts()...))
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan struct{})
		var liveWhileStopping atomic.Bool
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, "runner", func(lctx context.Context, term fencing.Lease) error {
				close(started)
				<-lctx.Done()
				time.Sleep(100 * time.Millisecond)
				l, err := e.Leader(context.Background())
				liveWhileStopping.Store(err == nil && l.Live && l.Token == term.Token)
				return nil
			})
		}()
		<-started
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
		if !liveWhileStopping.Load() {
			t.Error("the term was not live while lead was stopping: Run resigned before lead returned")
		}
		if l, err := e.Leader(context.Background()); err != nil || l.Live {
			t.Errorf("Leader after Run = %+v, %v; want a vacancy", l, err)
		}
	})
}

// TestRunReturnsLeadError: lead returning while still leader ends Run with
// its error, after resigning.
func TestRunReturnsLeadError(t *testing.T) {
	w := recipetest.Memory(t)
	e := election.New(w.Coordinator(t), "k", w.TTL)
	boom := errors.New("boom")
	err := e.Run(context.Background(), "me", func(context.Context, fencing.Lease) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want lead's error", err)
	}
	if l, _ := e.Leader(context.Background()); l.Live {
		t.Fatalf("Leader after Run = %+v, want a vacancy", l)
	}
	if err := e.Run(context.Background(), "bad\nidentity", nil); !errors.Is(err, fencing.ErrInvalidOwner) {
		t.Fatalf("Run with a bad identity = %v, want ErrInvalidOwner", err)
	}
}

// TestCampaignCanceled: a Campaign whose context ends returns its error and
// leaves no lease (and, by goleak, no goroutine) behind.
func TestCampaignCanceled(t *testing.T) {
	worlds(t, func(t *testing.T, w world) {
		e := election.New(w.Coordinator(t), "cancel", w.TTL, election.WithLockOptions(holdOpts()...))
		h, err := e.Campaign(context.Background(), "leader")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := e.Campaign(ctx, "waiter"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Campaign with a context that ends: %v, want DeadlineExceeded", err)
		}
		switch err := h.Release(context.Background()); {
		case errors.Is(err, fencing.ErrLeaseLost):
			// The leader's renewals came late (a slow host: runI, at
			// load 4-5, with PostgreSQL's 1 s TTL): the term ended by
			// itself, so what follows has nothing to judge.
			t.Logf("the leader's term ended before it resigned (a slow host): %v", err)
			return
		case err != nil:
			t.Fatal(err)
		}
		l, err := e.Leader(context.Background())
		if err != nil || l.Live {
			t.Fatalf("Leader after the leader resigned = %+v, %v; the canceled candidate left a term", l, err)
		}
		// A term outlives the context its Campaign waited with.
		ctx2, cancel2 := context.WithCancel(context.Background())
		h2, err := e.Campaign(ctx2, "again")
		if err != nil {
			t.Fatal(err)
		}
		cancel2()
		time.Sleep(50 * time.Millisecond)
		if h2.Context().Err() != nil {
			t.Fatal("the term ended with its Campaign's context")
		}
		h2.Release(context.Background())
	})
}

// noNotify is a backend that can inspect but not notify: Campaign and
// Observe poll.
type noNotify struct {
	backend.Backend
	backend.Inspector
}

// TestWithoutNotifier: on a backend that cannot notify, Campaign still
// takes over after a resignation and Observe reports each term and vacancy.
func TestWithoutNotifier(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(noNotify{mem, mem})
	ctx := context.Background()
	e := election.New(c, "poll", time.Minute, election.WithObserveInterval(10*time.Millisecond))
	o := observe(t, e)
	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *fencing.Held)
	go func() {
		h, err := e.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		won <- h
	}()
	time.Sleep(150 * time.Millisecond)
	a.Release(ctx)
	b := <-won
	time.Sleep(150 * time.Millisecond)
	b.Release(ctx)
	time.Sleep(150 * time.Millisecond)
	var got []string
	for _, l := range o.stop() {
		got = append(got, fmt.Sprintf("%v/%s/%d", l.Live, l.Identity, l.Token))
	}
	want := []string{"false//0", "true/a/1", "true/b/2", "false//0"}
	if !slices.Equal(got, want) && !slices.Equal(got, []string{"false//0", "true/a/1", "false//0", "true/b/2", "false//0"}) {
		t.Fatalf("Observe = %v, want %v (a vacancy between the terms allowed)", got, want)
	}
}
