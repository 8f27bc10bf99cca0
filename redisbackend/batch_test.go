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
// stops the backend's sender.
func TestQueuedRequestGivenUp(t *testing.T) {
	srv := redistest.Start(t, persistent)
	p := startProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	b := newBackend(t, client)
	raw := srv.Client()
	mustGrant(t, b, "warm-up", "w") // loads the script
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	grant := func(key string, timeout time.Duration, done chan<- error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := b.Grant(ctx, req(key, "id-"+key))
		done <- err
	}
	waitStalled := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); p.stalled.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d replies stalled, want %d", p.stalled.Load(), n)
			}
		}
	}

	// hang starts n lone requests (sent on their callers' goroutines) whose
	// replies hang until their deadline, so that later requests are batched.
	hang := func(prefix string, n int, timeout time.Duration) []chan error {
		t.Helper()
		var done []chan error
		for i := range n {
			p.arm(faultStall)
			d := make(chan error, 1)
			go grant(fmt.Sprintf("%s%d", prefix, i), timeout, d)
			waitStalled(p.stalled.Load() + 1)
			done = append(done, d)
		}
		return done
	}

	// The a's go out alone and hang; b, sent while they are in flight, goes
	// out in the sender's batch and hangs too, keeping the sender busy.
	aDone := hang("a", redisbackend.DirectInFlight, 3*time.Second)
	bDone, cDone := make(chan error, 1), make(chan error, 1)
	p.arm(faultStall)
	go grant("b", 1500*time.Millisecond, bDone)
	waitStalled(redisbackend.DirectInFlight + 1)
	// c waits behind b's batch and gives up first.
	go grant("c", 200*time.Millisecond, cDone)
	if err := <-cDone; !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("grant given up in the queue: %v, want DeadlineExceeded and not ErrOutcomeUnknown", err)
	}
	if err := <-bDone; !errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("batched grant whose reply hung: %v, want ErrOutcomeUnknown and DeadlineExceeded", err)
	}
	for _, d := range aDone {
		if err := <-d; !errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("lone grant whose reply hung: %v, want ErrOutcomeUnknown", err)
		}
	}
	mustGrant(t, b, "after", "x") // the sender is free again
	if a, bb, c := counter(t, raw, b, "a0"), counter(t, raw, b, "b"), counter(t, raw, b, "c"); a != "1" || bb != "1" || c != "" {
		t.Fatalf("counters a0=%q b=%q c=%q; want 1, 1 and never granted", a, bb, c)
	}

	// Close with a batch in flight and a request queued behind it: the
	// queued one fails with ErrClosed, unsent; the batch's caller is let go
	// at once, its outcome unknown; Close returns once the sender has, when
	// the hung batch reaches its deadline.
	dDone := hang("d", redisbackend.DirectInFlight, 1500*time.Millisecond)
	eDone, fDone := make(chan error, 1), make(chan error, 1)
	p.arm(faultStall)
	const eTimeout = 4 * time.Second
	eDeadline := time.Now().Add(eTimeout)
	go grant("e", eTimeout, eDone)
	waitStalled(2*redisbackend.DirectInFlight + 2)
	go grant("f", 10*time.Second, fDone)
	waitQueued(t, b, 1) // f waits behind e's batch
	start := time.Now()
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	if err := <-fDone; !errors.Is(err, backend.ErrClosed) || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("grant queued at Close: %v, want ErrClosed and not ErrOutcomeUnknown", err)
	}
	if err := <-eDone; !errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("grant in flight at Close: %v, want ErrOutcomeUnknown and ErrClosed", err)
	}
	// At once, not when the hung batch's deadline lets the flusher go:
	// seconds apart, which no busy machine closes.
	if now := time.Now(); !now.Before(eDeadline) {
		t.Fatalf("callers of a closed backend waited %v, until the hung batch's deadline; want them let go at once", now.Sub(start))
	}
	select {
	case <-closed:
	case <-time.After(eTimeout + 5*time.Second):
		t.Fatal("Close did not return after the hung batch's deadline")
	}
	for _, d := range dDone {
		<-d // a lone request is on its caller's goroutine: it ends at its deadline
	}
	if got := counter(t, raw, b, "f"); got != "" {
		t.Fatalf("the queued grant reached the server: counter %s", got)
	}
}
