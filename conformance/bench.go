package conformance

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// RunBenchmarks measures the operations users call, through a
// fencing.Coordinator over backends h makes: grant+release, renew and token
// check, from one goroutine and in parallel (b.RunParallel), on disjoint keys
// and on one hot key, and Lock's handoff from a releasing holder to a waiter.
// Run it with -cpu to vary the parallelism.
//
// Hot-key grant+release counts a grant that loses to another goroutine
// (ErrLeaseHeld) as an operation: it is a full round trip that a contended
// lock pays.
func RunBenchmarks(b *testing.B, h Harness) {
	newCoordinator := func(b *testing.B) *fencing.Coordinator {
		be, err := h.NewBackend(context.Background(), b)
		if err != nil {
			b.Fatalf("NewBackend: %v", err)
		}
		b.Cleanup(func() { be.Close() })
		return fencing.New(be)
	}
	const timeout = time.Minute

	b.Run("GrantRelease", func(b *testing.B) {
		c := newCoordinator(b)
		ctx := context.Background()
		for b.Loop() {
			if err := grantRelease(ctx, c, "k", timeout); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A grant of three keys in one GrantMany against three single grants:
	// the grants are timed, the releases are not.
	manyKeys := []string{"m/a", "m/b", "m/c"}
	b.Run("GrantMany3", func(b *testing.B) {
		c := newManyCoordinator(b, h)
		ctx := context.Background()
		for b.Loop() {
			leases, err := c.GrantMany(ctx, manyKeys, timeout)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			releaseAll(b, c, leases)
			b.StartTimer()
		}
	})
	b.Run("Grant3", func(b *testing.B) {
		c := newManyCoordinator(b, h)
		ctx := context.Background()
		leases := make([]fencing.Lease, len(manyKeys))
		for b.Loop() {
			for i, k := range manyKeys {
				var err error
				if leases[i], err = c.Grant(ctx, k, timeout); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			releaseAll(b, c, leases)
			b.StartTimer()
		}
	})
	b.Run("Renew", func(b *testing.B) {
		c := newCoordinator(b)
		ctx := context.Background()
		lease, err := c.Grant(ctx, "k", timeout)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.Renew(ctx, "k", lease.ID, timeout); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CheckToken", func(b *testing.B) {
		c := newCoordinator(b)
		ctx := context.Background()
		lease, err := c.Grant(ctx, "k", timeout)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if ok, err := c.CheckToken(ctx, "k", lease.Token); err != nil || !ok {
				b.Fatalf("CheckToken = %v, %v", ok, err)
			}
		}
	})

	// Handoff: from the holder's Release to the waiting Lock returning,
	// against one round trip of the store (a Token read) and the wake-up of
	// a parked goroutine, in the same iterations. Each iteration lets the
	// waiter settle into waiting first, so ns/op is mostly that pause: read
	// the custom metrics.
	b.Run("Handoff", func(b *testing.B) {
		c := newCoordinator(b)
		ctx := context.Background()
		settle := 5 * time.Millisecond
		if h.Traits().Now == nil {
			settle = 50 * time.Millisecond // a real server: let the watch or subscription settle
		}
		var handoff, fromCall, roundtrip, wake time.Duration
		for i := 0; i < b.N; i++ {
			holder, err := c.Hold(ctx, "handoff", timeout)
			if err != nil {
				b.Fatal(err)
			}
			locked := make(chan time.Time, 1)
			var next *fencing.Held
			var lockErr error
			go func() {
				next, lockErr = c.Lock(ctx, "handoff", timeout)
				locked <- time.Now()
			}()
			time.Sleep(settle)
			releasing := time.Now()
			if err := holder.Release(ctx); err != nil {
				b.Fatal(err)
			}
			released := time.Now()
			at := <-locked
			if lockErr != nil {
				b.Fatal(lockErr)
			}
			handoff += at.Sub(released)
			fromCall += at.Sub(releasing)
			start := time.Now()
			if _, _, err := c.Token(ctx, "handoff"); err != nil {
				b.Fatal(err)
			}
			roundtrip += time.Since(start)
			if err := next.Release(ctx); err != nil {
				b.Fatal(err)
			}
			wake += wakeParked(settle)
		}
		// From Release returning (Held.Release frees the key before it
		// waits for its renewer, so the waiter may return first: <= 0).
		b.ReportMetric(float64(handoff.Nanoseconds())/float64(b.N), "handoff-ns")
		// From Release being called: the release's own round trip, the
		// waiter's wake-up and its grant.
		b.ReportMetric(float64(fromCall.Nanoseconds())/float64(b.N), "release-to-lock-ns")
		b.ReportMetric(float64(roundtrip.Nanoseconds())/float64(b.N), "roundtrip-ns")
		b.ReportMetric(float64(wake.Nanoseconds())/float64(b.N), "wake-ns")
		// That, beyond waking a parked goroutine, in store round trips.
		b.ReportMetric(float64(max(fromCall-wake, 0))/float64(max(roundtrip, 1)), "(release-to-lock-wake)/roundtrip")
	})

	// Parallel, disjoint keys: each goroutine has keys of its own.
	b.Run("ParallelGrantRelease", func(b *testing.B) {
		c := newCoordinator(b)
		nextKey := keySource()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			key := nextKey()
			for pb.Next() {
				if err := grantRelease(ctx, c, key, timeout); err != nil {
					b.Error(err) // not Fatal: this is not the benchmark's goroutine
					return
				}
			}
		})
	})
	b.Run("ParallelRenew", func(b *testing.B) {
		c := newCoordinator(b)
		nextKey := keySource()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			key := nextKey()
			lease, err := c.Grant(ctx, key, timeout)
			if err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if _, err := c.Renew(ctx, key, lease.ID, timeout); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("ParallelCheckToken", func(b *testing.B) {
		c := newCoordinator(b)
		nextKey := keySource()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			key := nextKey()
			lease, err := c.Grant(ctx, key, timeout)
			if err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if ok, err := c.CheckToken(ctx, key, lease.Token); err != nil || !ok {
					b.Errorf("CheckToken = %v, %v", ok, err)
					return
				}
			}
		})
	})

	// Parallel, one hot key.
	b.Run("HotKeyGrantRelease", func(b *testing.B) {
		c := newCoordinator(b)
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				lease, err := c.Grant(ctx, "hot", timeout)
				if errors.Is(err, fencing.ErrLeaseHeld) {
					continue
				}
				if err != nil {
					b.Error(err)
					return
				}
				if err := c.Release(ctx, "hot", lease.ID); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("HotKeyCheckToken", func(b *testing.B) {
		c := newCoordinator(b)
		lease, err := c.Grant(context.Background(), "hot", timeout)
		if err != nil {
			b.Fatal(err)
		}
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if ok, err := c.CheckToken(ctx, "hot", lease.Token); err != nil || !ok {
					b.Errorf("CheckToken = %v, %v", ok, err)
					return
				}
			}
		})
	})
}

// keySource returns a function that gives each caller (each RunParallel
// goroutine) a key of its own.
func keySource() func() string {
	var n atomic.Int64
	return func() string { return "k" + strconv.FormatInt(n.Add(1), 10) }
}

// grantRelease grants key and releases it. It returns its error rather
// than failing b: RunParallel's goroutines may not call b.Fatal.
func grantRelease(ctx context.Context, c *fencing.Coordinator, key string, timeout time.Duration) error {
	lease, err := c.Grant(ctx, key, timeout)
	if err != nil {
		return err
	}
	return c.Release(ctx, key, lease.ID)
}

// wakeParked returns how long a goroutine parked on a channel for settle
// takes to run after a send: the floor under any handoff between goroutines
// (an idle processor's thread must be woken by the OS).
func wakeParked(settle time.Duration) time.Duration {
	ch, woke := make(chan time.Time), make(chan time.Time)
	go func() {
		<-ch
		woke <- time.Now()
	}()
	time.Sleep(settle)
	ch <- time.Now()
	sent := time.Now()
	return (<-woke).Sub(sent)
}

// newManyCoordinator returns a Coordinator over a backend for the cases of
// several keys (see ManyHarness), skipping without backend.MultiGranter.
func newManyCoordinator(b *testing.B, h Harness) *fencing.Coordinator {
	mk := h.NewBackend
	if mh, ok := h.(ManyHarness); ok {
		mk = mh.NewManyBackend
	}
	be, err := mk(context.Background(), b)
	if err != nil {
		b.Fatalf("NewBackend: %v", err)
	}
	b.Cleanup(func() { be.Close() })
	if _, ok := be.(backend.MultiGranter); !ok {
		b.Skip("the backend does not implement backend.MultiGranter")
	}
	return fencing.New(be)
}

func releaseAll(b *testing.B, c *fencing.Coordinator, leases []fencing.Lease) {
	for _, l := range leases {
		if err := c.Release(context.Background(), l.Key, l.ID); err != nil {
			b.Fatal(err)
		}
	}
}
