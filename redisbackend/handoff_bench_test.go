package redisbackend_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/heldtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// grantCounter counts a backend's Grant calls; every other method,
// the line's included, is the embedded backend's.
type grantCounter struct {
	*redisbackend.Backend
	grants atomic.Int64
}

func (g *grantCounter) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	g.grants.Add(1)
	return g.Backend.Grant(ctx, req)
}

// BenchmarkLockHandoff: n waiters on one key, each looping Lock and
// Release, with and without fencing.WithFIFO; ns/op is one handoff (one
// Lock that got the key and its Release), and grants/handoff the grant
// attempts it took. With FIFO only the next waiter wakes and tries once;
// without, every waiter wakes on each release and tries.
//
// The server fsyncs its append-only file every second, as the conformance
// benchmarks' does: with fsync always, each write (a grant, a release, a
// join, a leave) waits for the disk, and FIFO's two extra writes per
// handoff measure the disk more than the line.
func BenchmarkLockHandoff(b *testing.B) {
	srv := redistest.Start(b, redistest.Config{AppendOnly: true, AppendFsync: "everysec"})
	for _, n := range []int{1, 8, 32} {
		for _, fifo := range []bool{false, true} {
			b.Run(fmt.Sprintf("waiters=%d/fifo=%v", n, fifo), func(b *testing.B) {
				client := srv.Client()
				rb, err := redisbackend.New(context.Background(), client, redisbackend.WithLogger(quietLogger()), redisbackend.WithPrefix(fmt.Sprintf("handoff%d%v:", n, fifo)))
				if err != nil {
					b.Fatal(err)
				}
				defer rb.Close()
				g := &grantCounter{Backend: rb}
				c := fencing.New(g)
				var opts []fencing.LockOption
				if fifo {
					opts = append(opts, fencing.WithFIFO())
				}
				heldtest.LockHandoffs(b, []*fencing.Coordinator{c}, "k", n, opts...)
				b.ReportMetric(float64(g.grants.Load())/float64(b.N), "grants/handoff")
			})
		}
	}
}
