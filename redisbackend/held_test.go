package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/heldtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// lateness is how long after a timer set for its Deadline fired a lost
// lease's context may end: scheduling delay, nothing more.
const lateness = 100 * time.Millisecond

// TestHoldLostWithServer: a held lease whose Redis goes away ends its
// context no later than its Deadline, and says why; it never goes on as if
// it still held the lease. Once the server is killed (renewals are refused
// at the dial), and once the server hangs (renewals get no reply).
func TestHoldLostWithServer(t *testing.T) {
	cases := []struct {
		name  string
		fault func(srv *redistest.Server, p *faultProxy)
	}{
		{"Killed", func(srv *redistest.Server, _ *faultProxy) { srv.Kill() }},
		{"Hung", func(_ *redistest.Server, p *faultProxy) { p.arm(faultStall) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, persistent)
			p := startProxy(t, srv.Addr())
			client := redis.NewClient(&redis.Options{Addr: p.Addr()}) // default timeouts and retries
			defer client.Close()
			c := fencing.New(newBackend(t, client))
			h, err := c.Hold(context.Background(), "k", 600*time.Millisecond, fencing.WithMargin(100*time.Millisecond))
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			defer h.Release(context.Background())
			time.Sleep(300 * time.Millisecond) // a renewal or so confirmed
			last := h.Lease()
			tc.fault(srv, p)
			// The context ends at the Deadline, timed against a timer for
			// it (re-armed should a renewal in flight move it).
			heldtest.EndsAtDeadline(t, h, 10*time.Second, lateness)
			final := h.Lease()
			if final.Deadline.After(last.Deadline.Add(time.Second)) {
				t.Fatalf("the Deadline moved from %v to %v with the server gone", last.Deadline, final.Deadline)
			}
			if err := h.Err(); !errors.Is(err, fencing.ErrLeaseLost) {
				t.Fatalf("Err after the server went away: %v, want ErrLeaseLost", err)
			}
			if cause := context.Cause(h.Context()); !errors.Is(cause, fencing.ErrLeaseLost) {
				t.Fatalf("the context's cause: %v, want ErrLeaseLost", cause)
			}
		})
	}
}

// TestLockManyWaiters: the suite's LockManyWaiters holds one backend's
// waiters to taking one key in turn; this adds waiters on two backends (two
// clients, two subscriptions to one channel) and a Cluster, where a key's
// channel lives on its shard: no two hold the key at once, and tokens
// increase in the order the locks were taken.
func TestLockManyWaiters(t *testing.T) {
	t.Run("Standalone", func(t *testing.T) {
		srv := redistest.Start(t, persistent)
		testLockManyWaiters(t, srv.Client(), srv.Client())
	})
	t.Run("Cluster", func(t *testing.T) {
		c := startCluster(t)
		testLockManyWaiters(t, c.Client(t), c.Client(t))
	})
}

func testLockManyWaiters(t *testing.T, clients ...redis.UniversalClient) {
	coords := make([]*fencing.Coordinator, len(clients))
	for i, cl := range clients {
		coords[i] = fencing.New(newClusterBackend(context.Background(), t, cl, "lock:"))
	}
	const waiters, rounds = 8, 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		inside atomic.Int32
		mu     sync.Mutex
		tokens []uint64
		errs   = make(chan error, 3*waiters*rounds) // up to three per lock
		wg     sync.WaitGroup
	)
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := coords[w%len(coords)]
			for r := range rounds {
				h, err := c.Lock(ctx, "one-key", 5*time.Second)
				if err != nil {
					errs <- fmt.Errorf("waiter %d round %d: Lock: %w", w, r, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("waiter %d holds the lock with %d others", w, n-1)
				}
				mu.Lock()
				tokens = append(tokens, h.Token())
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				inside.Add(-1)
				if err := h.Release(ctx); err != nil {
					errs <- fmt.Errorf("waiter %d: Release: %w", w, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(tokens) != waiters*rounds {
		t.Fatalf("%d locks taken, want %d", len(tokens), waiters*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens in lock order %v: not increasing at %d", tokens, i)
		}
	}
}
