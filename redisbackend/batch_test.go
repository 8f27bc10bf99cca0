package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// pipelineSizes is a go-redis hook that records the size of every
// pipeline the client sends.
type pipelineSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (h *pipelineSizes) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineSizes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineSizes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.sizes = append(h.sizes, len(cmds))
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *pipelineSizes) largest() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	largest := 0
	for _, n := range h.sizes {
		largest = max(largest, n)
	}
	return largest
}

// TestConcurrentRequestsShareRoundTrips: requests made while others are in
// flight go out together in pipelines, and each still gets its own answer.
func TestConcurrentRequestsShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	hook := &pipelineSizes{}
	client.AddHook(hook)
	b := newBackend(t, client)
	ctx := context.Background()
	const workers, rounds = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", w)
			for i := range rounds {
				id := fmt.Sprintf("%d-%d", w, i)
				lease, err := b.Grant(ctx, req(key, id))
				if err == nil && lease.Token != uint64(i+1) {
					err = fmt.Errorf("grant %d on %s: token %d", i, key, lease.Token)
				}
				if err == nil {
					var tok uint64
					var live bool
					tok, live, err = b.Token(ctx, key)
					if err == nil && (!live || tok != lease.Token) {
						err = fmt.Errorf("Token(%s) = %d, %v; want %d, live", key, tok, live, lease.Token)
					}
				}
				if err == nil {
					err = b.Release(ctx, key, id)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := hook.largest(); n < 3 {
		t.Errorf("largest pipeline held %d commands: concurrent requests did not share round trips", n)
	}
	for w := range workers {
		if got := counter(t, client, b, fmt.Sprintf("k%d", w)); got != fmt.Sprint(rounds) {
			t.Errorf("k%d: counter %s, want %d", w, got, rounds)
		}
	}
}

// TestQueuedRequestGivenUp: a request whose context ends while it waits in
// the queue behind a batch in flight was never sent: its error is the
// context's alone and the server never sees it; one whose context ends
// after its batch went out may have run (ErrOutcomeUnknown). Close then
// fails what is queued, unsent, lets the batch's callers go at once, its
// outcome unknown, and returns once the sender has.
//
// Stalled replies keep requests in flight until the test resets the
// proxy's connections, never until a deadline: the client has no read
// timeout, and no request that must stay in flight has a deadline. So a
// server slow to answer (an fsync of appendfsync always on a busy disk)
// slows the test down but cannot end a request before its reply is seen.
func TestQueuedRequestGivenUp(t *testing.T) {
	srv := redistest.Start(t, persistent)
	p := startProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, ReadTimeout: -1})
	defer client.Close()
	var ignore goleak.Option
	t.Cleanup(func() { // after the backend's Close, which a failed test needs too
		if ignore != nil {
			goleak.VerifyNone(t, ignore)
		}
	})
	b := newBackend(t, client)
	raw := srv.Client()
	mustGrant(t, b, "warm-up", "w") // loads the script
	ignore = goleak.IgnoreCurrent()

	grant := func(ctx context.Context, key string) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := b.Grant(ctx, req(key, "id-"+key))
			done <- err
		}()
		return done
	}
	// until waits for cond while the request whose error comes on done is
	// in flight; nothing but the test ends it, so its end is a failure.
	until := func(cond func() bool, done chan error, what string) {
		t.Helper()
		for !cond() {
			select {
			case err := <-done:
				t.Fatalf("waiting for %s: the request ended first: %v", what, err)
			case <-time.After(time.Millisecond):
			}
		}
	}
	stalled := func(n int32) func() bool { return func() bool { return p.stalled.Load() >= n } }
	queued := func() bool { return redisbackend.Queued(b) >= 1 }

	// hang starts n lone requests (sent on their callers' goroutines) whose
	// replies stall until the test resets the proxy's connections, so that
	// later requests are batched.
	hang := func(prefix string, n int) []chan error {
		t.Helper()
		var done []chan error
		for i := range n {
			want := p.stalled.Load() + 1 // before the request: its reply may stall at once
			p.arm(faultStall)
			d := grant(context.Background(), fmt.Sprintf("%s%d", prefix, i))
			until(stalled(want), d, "a lone reply to stall")
			done = append(done, d)
		}
		return done
	}

	// The a's go out alone and hang; b, sent while they are in flight, goes
	// out in the sender's batch and hangs too, keeping the sender busy.
	aDone := hang("a", redisbackend.DirectInFlight)
	bCtx, bCancel := context.WithCancel(context.Background())
	defer bCancel()
	p.arm(faultStall)
	bDone := grant(bCtx, "b")
	until(stalled(redisbackend.DirectInFlight+1), bDone, "the batch's reply to stall")
	// c waits behind b's batch and gives up first.
	cCtx, cCancel := context.WithCancel(context.Background())
	defer cCancel()
	cDone := grant(cCtx, "c")
	until(queued, cDone, "c to be queued")
	cCancel()
	if err := <-cDone; !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("grant given up in the queue: %v, want Canceled and not ErrOutcomeUnknown", err)
	}
	bCancel()
	if err := <-bDone; !errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("batched grant given up while its reply hung: %v, want ErrOutcomeUnknown and Canceled", err)
	}
	p.Reset() // ends the a's exchanges and b's batch
	for _, d := range aDone {
		if err := <-d; !errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("lone grant whose reply was lost: %v, want ErrOutcomeUnknown", err)
		}
	}
	mustGrant(t, b, "after", "x")
	if a, bb, c := counter(t, raw, b, "a0"), counter(t, raw, b, "b"), counter(t, raw, b, "c"); a != "1" || bb != "1" || c != "" {
		t.Fatalf("counters a0=%q b=%q c=%q; want 1, 1 and never granted", a, bb, c)
	}

	// Close with a batch in flight and a request queued behind it: the
	// queued one fails with ErrClosed, unsent; the batch's caller is let go
	// at once, its outcome unknown, while the sender still waits for the
	// batch's replies; Close returns once the sender has.
	dDone := hang("d", redisbackend.DirectInFlight)
	p.arm(faultStall)
	eDone := grant(context.Background(), "e")
	until(stalled(2*redisbackend.DirectInFlight+2), eDone, "the batch's reply to stall")
	fDone := grant(context.Background(), "f")
	until(queued, fDone, "f to be queued behind e's batch")
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	if err := <-fDone; !errors.Is(err, backend.ErrClosed) || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("grant queued at Close: %v, want ErrClosed and not ErrOutcomeUnknown", err)
	}
	if err := <-eDone; !errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("grant in flight at Close: %v, want ErrOutcomeUnknown and ErrClosed", err)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while the sender still waited for the hung batch's replies")
	default: // the callers were let go first, as they should
	}
	p.Reset() // ends the d's exchanges and e's batch
	<-closed
	for _, d := range dDone {
		if err := <-d; !errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("lone grant whose reply was lost: %v, want ErrOutcomeUnknown", err)
		}
	}
	if got := counter(t, raw, b, "f"); got != "" {
		t.Fatalf("the queued grant reached the server: counter %s", got)
	}
}
