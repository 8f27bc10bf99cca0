package etcdbackend_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/etcdtest"
)

const benchTimeout = time.Minute

// BenchmarkVersusMutex compares, on the same server in the same run, one
// fencing grant+release with one lock+unlock of etcd's own
// clientv3/concurrency Mutex. Each iteration does one of each, alternating
// which goes first, and times them separately; the benchmark reports both
// rates and their ratio (ours / mutex).
//
// Like a fencing lease, which gets a fresh etcd lease per grant, the Mutex's
// lease is its Session's, so "session-per-lock" creates and closes a Session
// around each Lock+Unlock: a lock whose lifetime is bounded by its own TTL.
// "shared-session" reuses one Session for every lock: cheaper, but every lock
// taken by that client then lives and dies with one lease, so it has no
// per-lock expiry.
func BenchmarkVersusMutex(b *testing.B) {
	cli := etcdtest.Client(b)
	be, err := etcdbackend.New(cli, etcdbackend.WithPrefix(newPrefix("bench")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	c := fencing.New(be)
	ctx := context.Background()
	mutexKey := newPrefix("mutex") + "k"

	ours := func() {
		lease, err := c.Grant(ctx, "k", benchTimeout)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(ctx, "k", lease.ID); err != nil {
			b.Fatal(err)
		}
	}
	compare := func(b *testing.B, theirs func()) {
		var oursTime, theirsTime time.Duration
		i := 0
		for b.Loop() {
			first, second, t1, t2 := ours, theirs, &oursTime, &theirsTime
			if i%2 == 1 {
				first, second, t1, t2 = theirs, ours, &theirsTime, &oursTime
			}
			i++
			start := time.Now()
			first()
			mid := time.Now()
			second()
			*t1 += mid.Sub(start)
			*t2 += time.Since(mid)
		}
		oursRate := float64(i) / oursTime.Seconds()
		theirsRate := float64(i) / theirsTime.Seconds()
		b.ReportMetric(oursRate, "fencing-ops/s")
		b.ReportMetric(theirsRate, "mutex-ops/s")
		b.ReportMetric(oursRate/theirsRate, "ratio")
	}

	b.Run("session-per-lock", func(b *testing.B) {
		compare(b, func() {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(benchTimeout/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			lockUnlock(b, ctx, concurrency.NewMutex(s, mutexKey))
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("shared-session", func(b *testing.B) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(benchTimeout/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		compare(b, func() { lockUnlock(b, ctx, concurrency.NewMutex(s, mutexKey)) })
	})
}

func lockUnlock(b *testing.B, ctx context.Context, m *concurrency.Mutex) {
	if err := m.Lock(ctx); err != nil {
		b.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
}
