package conformance

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// RunBenchmarks measures the operations users call, through a
// fencing.Coordinator over backends h makes: grant+release, renew and token
// check, from one goroutine and in parallel (b.RunParallel), on disjoint keys
// and on one hot key. Run it with -cpu to vary the parallelism.
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
