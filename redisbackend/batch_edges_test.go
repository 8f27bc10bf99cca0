package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// waitQueued waits until b's batching queue holds at least n requests.
func waitQueued(t *testing.T, b *redisbackend.Backend, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); redisbackend.Queued(b) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", redisbackend.Queued(b), n)
		}
	}
}

// More than a batch's worth queued at once (the server stopped while the
// flusher waits on its first batch): every request goes out, in several batches of
// at most maxBatch commands, and gets its own answer.
func TestQueueLongerThanABatch(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	hook := &pipelineSizes{}
	client.AddHook(hook)
	b := newBackend(t, client, redisbackend.WithEveryRequestBatched())
	mustGrant(t, b, "warm-up", "w") // loads the script
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	const n = 2*redisbackend.MaxBatch + 10
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	grant := func(i int) {
		key := fmt.Sprintf("q%d", i)
		l, err := b.Grant(ctx, req(key, "id-"+key))
		if err == nil && l.Token != 1 {
			err = fmt.Errorf("%s: token %d, want 1", key, l.Token)
		}
		errs[i] = err
	}
	for i := range n {
		wg.Go(func() { grant(i) })
	}
	// All in, and more than a batch queued: the flusher is stuck on its
	// first batch (at most maxBatch) while the server is stopped.
	for deadline := time.Now().Add(10 * time.Second); redisbackend.InFlight(b) != n || redisbackend.Queued(b) <= redisbackend.MaxBatch; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight, %d queued; want %d, more than %d", redisbackend.InFlight(b), redisbackend.Queued(b), n, redisbackend.MaxBatch)
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("grant %d: %v", i, err)
		}
	}
	if got := hook.largest(); got > redisbackend.MaxBatch {
		t.Errorf("a pipeline of %d commands, want at most %d", got, redisbackend.MaxBatch)
	}
}

// A batch whose connection breaks after the server ran it is not sent
// again: its scripts go out at most once, and their callers learn that
// the outcome is unknown. The server's own count of the scripts it ran
// tells a resend (which, the grants being idempotent, would otherwise
// pass unseen).
func TestBrokenBatchNotResent(t *testing.T) {
	srv := redistest.Start(t, persistent)
	p := startProxy(t, srv.Addr())
	// No read timeout: the stalled reply ends when the test resets the
	// proxy's connections, however slow the server is to answer.
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 3, ContextTimeoutEnabled: true, ReadTimeout: -1})
	defer client.Close()
	hook := &pipelineSizes{}
	client.AddHook(hook)
	b := newBackend(t, client, redisbackend.WithEveryRequestBatched())
	raw := srv.Client()
	mustGrant(t, b, "warm-up", "w") // loads the script
	before := evalshaCalls(t, raw)

	// A first request whose reply stalls keeps the flusher busy while two
	// more queue behind it; they go out together once the test resets its
	// connection.
	p.arm(faultStall)
	stalled := make(chan error, 1)
	go func() {
		_, err := b.Grant(context.Background(), req("stalled", "id-stalled"))
		stalled <- err
	}()
	for p.stalled.Load() < 1 {
		select {
		case err := <-stalled: // nothing but the reset ends it
			t.Fatalf("the first request ended before its reply stalled: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	errs := make(chan error, 2)
	for _, key := range []string{"g1", "g2"} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := b.Grant(ctx, req(key, "id-"+key))
			errs <- err
		}()
	}
	waitQueued(t, b, 2)
	p.arm(faultDrop)
	p.Reset() // ends the stalled exchange: the flusher sends the queue
	if err := <-stalled; !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("grant whose reply stalled: %v, want ErrOutcomeUnknown", err)
	}
	for range 2 {
		// The broken connection answers it, long before its deadline.
		if err := <-errs; !errors.Is(err, backend.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("batched grant whose connection broke after the server ran it: %v, want ErrOutcomeUnknown before its deadline", err)
		}
	}
	if p.dropped.Load() != 1 || hook.largest() < 2 {
		t.Fatalf("dropped %d replies, largest pipeline %d: the test did not break a batch", p.dropped.Load(), hook.largest())
	}
	if n := evalshaCalls(t, raw) - before; n != 3 {
		t.Errorf("the server ran %d scripts for three requests sent once each", n)
	}
	for _, key := range []string{"g1", "g2"} {
		if got := counter(t, raw, b, key); got != "1" {
			t.Errorf("%s: counter %q, want 1 (granted once)", key, got)
		}
	}
}

// evalshaCalls returns how many EVALSHA commands the server has run.
func evalshaCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}
