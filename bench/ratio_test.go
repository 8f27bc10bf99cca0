package bench

import (
	"context"
	cryptorand "crypto/rand"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// BenchmarkRatios runs every operation of the sequential benchmarks once
// per iteration, round robin on one goroutine, timing each call, and reports
// the median latency of each (µs) and the ratios that matter. Because the
// operations take turns, a burst of load from other processes slows them
// all alike, and the medians ignore the bursts: on a shared machine these
// ratios are far steadier than ones taken between separate benchmarks.
//
// The order is shuffled every round.
//
// Two floors run alongside: luafloor, an EVALSHA of `return 1` (the least
// any one-script operation can cost), and txcheck, TIME and HMGET of three
// hash fields in one MULTI/EXEC round trip (what a token check could cost
// without Lua).
//
// Grant+release, obtain+release and lock+unlock are two round trips each
// and are compared with two PINGs; renew and token check with one.
func BenchmarkRatios(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	coord := newCoordinator(b, c, "bench:ratio:")
	held, err := coord.Grant(ctx, "held", leaseTTL)
	if err != nil {
		b.Fatal(err)
	}
	locker := redislock.New(c)
	rs := redsync.New(redsyncgoredis.NewPool(c))
	lockKey := "bench:ratio:" + cryptorand.Text()

	ops := []struct {
		name string
		fn   func() error
	}{
		{"ping", func() error { return c.Ping(ctx).Err() }},
		{"pingpair", func() error {
			if err := c.Ping(ctx).Err(); err != nil {
				return err
			}
			return c.Ping(ctx).Err()
		}},
		{"luafloor", func() error { return luaFloor.Run(ctx, c, nil).Err() }},
		{"txcheck", func() error {
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Time(ctx)
				p.HMGet(ctx, "bench:tx:key", "token", "exp", "rel")
				return nil
			})
			return err
		}},
		{"pipecheck", func() error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.HMGet(ctx, "bench:tx:key", "token", "exp")
				p.Time(ctx)
				return nil
			})
			return err
		}},
		{"grantrelease", func() error {
			lease, err := coord.Grant(ctx, "key", leaseTTL)
			if err != nil {
				return err
			}
			return coord.Release(ctx, "key", lease.ID)
		}},
		{"renew", func() error {
			_, err := coord.Renew(ctx, "held", held.ID, leaseTTL)
			return err
		}},
		{"check", func() error {
			_, err := coord.CheckToken(ctx, "held", held.Token)
			return err
		}},
		{"redislock", func() error {
			lock, err := locker.Obtain(ctx, lockKey+":redislock", leaseTTL, nil)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
		{"redsync", func() error {
			m := rs.NewMutex(lockKey+":redsync", redsync.WithExpiry(leaseTTL), redsync.WithTries(1))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			_, err := m.UnlockContext(ctx)
			return err
		}},
	}
	times := make([][]time.Duration, len(ops))
	for b.Loop() {
		// A fresh order every round, so no operation always follows the
		// same one (the first call after another kind of call is slower).
		for _, i := range rand.Perm(len(ops)) {
			op := ops[i]
			start := time.Now()
			if err := op.fn(); err != nil {
				b.Fatalf("%s: %v", op.name, err)
			}
			times[i] = append(times[i], time.Since(start))
		}
	}
	median := make(map[string]float64, len(ops))
	for i, op := range ops {
		median[op.name] = medianMicros(times[i])
		b.ReportMetric(median[op.name], op.name+"-µs")
	}
	b.ReportMetric(median["luafloor"]/median["ping"], "luafloor/ping")
	b.ReportMetric(median["txcheck"]/median["ping"], "txcheck/ping")
	b.ReportMetric(median["pipecheck"]/median["ping"], "pipecheck/ping")
	b.ReportMetric(median["grantrelease"]/median["pingpair"], "grantrelease/pingpair")
	b.ReportMetric(median["renew"]/median["ping"], "renew/ping")
	b.ReportMetric(median["check"]/median["ping"], "check/ping")
	b.ReportMetric(median["grantrelease"]/median["redislock"], "grantrelease/redislock")
	b.ReportMetric(median["grantrelease"]/median["redsync"], "grantrelease/redsync")
	// ns/op is the time of one whole round of all operations: not useful.
	b.ReportMetric(0, "ns/op")
}

// medianMicros returns the median of d in microseconds.
func medianMicros(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Microsecond)
}
