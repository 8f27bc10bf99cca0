package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// benchTTL is the timeout of every lease the benchmarks grant: long enough
// that none expires during a run.
const benchTTL = time.Minute

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
	cases := []struct {
		name string
		run  func(*testing.B, *fencing.Coordinator)
		many bool // a case of several keys: see newBenchCoordinator
	}{
		{"GrantRelease", serial(opGrantRelease), false},
		// A grant of three keys in one GrantMany against three single
		// grants: the grants are timed, the releases are not.
		{"GrantMany3", grantKeys(grantMany), true},
		{"Grant3", grantKeys(grantEach), true},
		{"Renew", serial(opRenew), false},
		{"CheckToken", serial(opCheckToken), false},
		{"Handoff", handoff(h.Traits().Now == nil), false},
		// Parallel, disjoint keys: each goroutine has keys of its own.
		{"ParallelGrantRelease", parallel(opGrantRelease), false},
		{"ParallelRenew", parallel(opRenew), false},
		{"ParallelCheckToken", parallel(opCheckToken), false},
		// Parallel, one hot key.
		{"HotKeyGrantRelease", hotKey(opGrantRelease), false},
		{"HotKeyCheckToken", hotKey(opCheckToken), false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			c.run(b, newBenchCoordinator(b, h, c.many))
		})
	}
}

// A benchOp is an operation the benchmarks repeat on one key: it grants
// what the operation needs and returns the step each iteration runs. A
// step returns its error rather than failing b: RunParallel's goroutines
// may not call b.Fatal.
type benchOp func(ctx context.Context, c *fencing.Coordinator, key string) (step func(context.Context) error, err error)

// opGrantRelease grants key and releases it.
func opGrantRelease(_ context.Context, c *fencing.Coordinator, key string) (func(context.Context) error, error) {
	return func(ctx context.Context) error {
		lease, err := c.Grant(ctx, key, benchTTL)
		if err != nil {
			return err
		}
		return c.Release(ctx, key, lease.ID)
	}, nil
}

// opRenew renews one live lease on key.
func opRenew(ctx context.Context, c *fencing.Coordinator, key string) (func(context.Context) error, error) {
	lease, err := c.Grant(ctx, key, benchTTL)
	return func(ctx context.Context) error {
		_, err := c.Renew(ctx, key, lease.ID, benchTTL)
		return err
	}, err
}

// opCheckToken checks the token of one live lease on key.
func opCheckToken(ctx context.Context, c *fencing.Coordinator, key string) (func(context.Context) error, error) {
	lease, err := c.Grant(ctx, key, benchTTL)
	return func(ctx context.Context) error {
		if ok, err := c.CheckToken(ctx, key, lease.Token); err != nil || !ok {
			return fmt.Errorf("CheckToken = %v, %v", ok, err)
		}
		return nil
	}, err
}

// serial runs op from the benchmark's goroutine, on one key.
func serial(op benchOp) func(*testing.B, *fencing.Coordinator) {
	return func(b *testing.B, c *fencing.Coordinator) {
		ctx := context.Background()
		step, err := op(ctx, c, "k")
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := step(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// parallel runs op from RunParallel's goroutines, each on a key of its own.
func parallel(op benchOp) func(*testing.B, *fencing.Coordinator) {
	return func(b *testing.B, c *fencing.Coordinator) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			step, err := op(ctx, c, "k"+strconv.FormatInt(n.Add(1), 10))
			if err != nil {
				b.Error(err)
				return
			}
			runSteps(b, pb, step, false)
		})
	}
}

// hotKey runs op from RunParallel's goroutines, all on one key, prepared
// once: a grant that loses the key to another goroutine (ErrLeaseHeld)
// counts as an operation.
func hotKey(op benchOp) func(*testing.B, *fencing.Coordinator) {
	return func(b *testing.B, c *fencing.Coordinator) {
		step, err := op(context.Background(), c, "hot")
		if err != nil {
			b.Fatal(err)
		}
		b.RunParallel(func(pb *testing.PB) {
			runSteps(b, pb, step, true)
		})
	}
}

// runSteps runs step until pb is done, on a RunParallel goroutine: an
// error is recorded with b.Error (not Fatal: this is not the benchmark's
// goroutine) and ends the goroutine's loop.
func runSteps(b *testing.B, pb *testing.PB, step func(context.Context) error, lostIsOp bool) {
	ctx := context.Background()
	for pb.Next() {
		if err := step(ctx); err != nil && !(lostIsOp && errors.Is(err, fencing.ErrLeaseHeld)) {
			b.Error(err)
			return
		}
	}
}

// grantMany takes keys in one GrantMany.
func grantMany(ctx context.Context, c *fencing.Coordinator, keys []string) ([]fencing.Lease, error) {
	return c.GrantMany(ctx, keys, benchTTL)
}

// grantEach takes keys with one Grant each.
func grantEach(ctx context.Context, c *fencing.Coordinator, keys []string) ([]fencing.Lease, error) {
	leases := make([]fencing.Lease, len(keys))
	for i, k := range keys {
		var err error
		if leases[i], err = c.Grant(ctx, k, benchTTL); err != nil {
			return nil, err
		}
	}
	return leases, nil
}

// grantKeys times grant of three keys; the releases are not timed.
func grantKeys(grant func(context.Context, *fencing.Coordinator, []string) ([]fencing.Lease, error)) func(*testing.B, *fencing.Coordinator) {
	return func(b *testing.B, c *fencing.Coordinator) {
		ctx := context.Background()
		keys := []string{"m/a", "m/b", "m/c"}
		for b.Loop() {
			leases, err := grant(ctx, c, keys)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			for _, l := range leases {
				if err := c.Release(ctx, l.Key, l.ID); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
	}
}

// handoff measures Lock's handoff: from the holder's Release to the
// waiting Lock returning, against one round trip of the store (a Token
// read) and the wake-up of a parked goroutine, in the same iterations. Each
// iteration lets the waiter settle into waiting first (longer on a real
// server, for its watch or subscription), so ns/op is mostly that pause:
// read the custom metrics.
func handoff(realServer bool) func(*testing.B, *fencing.Coordinator) {
	return func(b *testing.B, c *fencing.Coordinator) {
		ctx := context.Background()
		settle := 5 * time.Millisecond
		if realServer {
			settle = 50 * time.Millisecond
		}
		var handoff, fromCall, roundtrip, wake time.Duration
		for i := 0; i < b.N; i++ {
			holder, err := c.Hold(ctx, "handoff", benchTTL)
			if err != nil {
				b.Fatal(err)
			}
			locked := make(chan time.Time, 1)
			var next *fencing.Held
			var lockErr error
			go func() {
				next, lockErr = c.Lock(ctx, "handoff", benchTTL)
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
	}
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

// newBenchCoordinator returns a Coordinator over a backend h makes, closed
// when b ends. For a case of several keys (many) the backend comes from
// ManyHarness when h implements it, and the case is skipped without
// backend.MultiGranter.
func newBenchCoordinator(b *testing.B, h Harness, many bool) *fencing.Coordinator {
	mk := h.NewBackend
	if mh, ok := h.(ManyHarness); ok && many {
		mk = mh.NewManyBackend
	}
	be, err := mk(context.Background(), b)
	if err != nil {
		b.Fatalf("NewBackend: %v", err)
	}
	b.Cleanup(func() { be.Close() })
	if _, ok := be.(backend.MultiGranter); many && !ok {
		b.Skip("the backend does not implement backend.MultiGranter")
	}
	return fencing.New(be)
}
