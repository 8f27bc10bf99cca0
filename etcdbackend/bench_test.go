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

// BenchmarkHandoff measures how fast a waiting Lock gets a key its holder
// releases: the time from the holder's Release returning to the waiter's
// Lock returning, against the same for etcd's concurrency.Mutex (Unlock
// returning to the waiting Lock returning), on the same server in the same
// run. Each iteration hands the key over once with each, alternating which
// goes first, and lets each waiter settle into waiting (the same pause for
// both, see settle) before the release. It reports both mean handoff times and their
// ratio (fencing / Mutex).
func BenchmarkHandoff(b *testing.B) {
	cli := etcdtest.Client(b)
	be, err := etcdbackend.New(cli, etcdbackend.WithPrefix(newPrefix("handoff")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	c := fencing.New(be)
	ctx := context.Background()
	// The pause before each release, for the waiter to subscribe, try and
	// wait. It is longer than etcd's 100ms watcher sync period: a Mutex
	// waiter watches from a past revision, and such a watch hears of events
	// only at the next sync until it has caught up (with 30ms, a Mutex
	// handoff takes ~35ms and fencing's under 1ms). This gives the Mutex its
	// best case.
	const settle = 150 * time.Millisecond

	held, err := c.Lock(ctx, "k", benchTimeout)
	if err != nil {
		b.Fatal(err)
	}
	fencingHandoff := func() time.Duration {
		got := make(chan *fencing.Held, 1)
		go func() {
			h, err := c.Lock(ctx, "k", benchTimeout)
			if err != nil {
				b.Error(err)
			}
			got <- h
		}()
		time.Sleep(settle)
		if err := held.Release(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		held = <-got
		d := time.Since(released)
		if held == nil {
			b.FailNow()
		}
		return d
	}

	mutexKey := newPrefix("handoff-mutex") + "k"
	var sessions [2]*concurrency.Session
	for i := range sessions {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(benchTimeout/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		sessions[i] = s
	}
	holder := concurrency.NewMutex(sessions[0], mutexKey)
	if err := holder.Lock(ctx); err != nil {
		b.Fatal(err)
	}
	turn := 0
	mutexHandoff := func() time.Duration {
		turn++
		next := concurrency.NewMutex(sessions[turn%2], mutexKey)
		locked := make(chan error, 1)
		go func() { locked <- next.Lock(ctx) }()
		time.Sleep(settle)
		if err := holder.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		unlocked := time.Now()
		err := <-locked
		d := time.Since(unlocked)
		if err != nil {
			b.Fatal(err)
		}
		holder = next
		return d
	}

	var ours, theirs time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			ours += fencingHandoff()
			theirs += mutexHandoff()
		} else {
			theirs += mutexHandoff()
			ours += fencingHandoff()
		}
		i++
	}
	b.StopTimer()
	_ = held.Release(ctx)
	_ = holder.Unlock(ctx)
	b.ReportMetric(float64(ours.Microseconds())/float64(i), "fencing-µs/handoff")
	b.ReportMetric(float64(theirs.Microseconds())/float64(i), "mutex-µs/handoff")
	b.ReportMetric(float64(ours)/float64(theirs), "ratio")
}
