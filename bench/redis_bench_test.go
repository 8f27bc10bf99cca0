package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/redisbackend"
)

// leaseTTL is long enough that no lease or lock expires during a benchmark.
const leaseTTL = time.Minute

// newCoordinator returns a Coordinator over a Redis backend on c whose keys
// live under a prefix of their own, new on every call (a benchmark function
// runs several times, and a shared REDIS_ADDR server keeps old leases).
func newCoordinator(tb testing.TB, c redis.UniversalClient, prefix string) *fencing.Coordinator {
	tb.Helper()
	return newCoordinatorPrefix(tb, c, prefix+rand.Text()+":")
}

// newCoordinatorPrefix returns a Coordinator over a Redis backend on c with
// exactly this key prefix.
func newCoordinatorPrefix(tb testing.TB, c redis.UniversalClient, prefix string) *fencing.Coordinator {
	tb.Helper()
	// The server's persistence is not what is measured: skip the check.
	be, err := redisbackend.New(context.Background(), c, redisbackend.WithPrefix(prefix),
		redisbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		tb.Fatalf("redisbackend.New: %v", err)
	}
	tb.Cleanup(func() { be.Close() })
	return fencing.New(be)
}

// The sequential benchmarks below run one operation at a time on one
// goroutine, so ns/op is the round-trip latency a caller sees. Grant+release,
// lock+unlock and obtain+release are two round trips each: compare them with
// BenchmarkPingPair, the others with BenchmarkPing.

// BenchmarkPing is the floor: one PING round trip on the same client.
func BenchmarkPing(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// BenchmarkPingPair is two PING round trips, the floor for an operation pair.
func BenchmarkPingPair(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// luaFloor is the cheapest script there is: what EVALSHA costs before a
// script does any work.
var luaFloor = redis.NewScript(`return 1`)

// BenchmarkLuaFloor runs the empty script: the floor for any operation that
// is one Lua script, as every fencing operation that changes a lease is.
func BenchmarkLuaFloor(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		if err := luaFloor.Run(ctx, c, nil).Err(); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// BenchmarkTxTimeHMGet reads the server's TIME and a hash's fields in one
// MULTI/EXEC round trip: what a token check could cost without Lua.
func BenchmarkTxTimeHMGet(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	if err := c.HSet(ctx, "bench:tx:key", "token", 1, "exp", 1, "rel", 0).Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Time(ctx)
			p.HMGet(ctx, "bench:tx:key", "token", "exp", "rel")
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// BenchmarkFencingGrantRelease grants a lease on one key and releases it.
func BenchmarkFencingGrantRelease(b *testing.B) {
	c := newClient(b)
	coord := newCoordinator(b, c, "bench:gr:")
	ctx := context.Background()
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		lease, err := coord.Grant(ctx, "key", leaseTTL)
		if err != nil {
			b.Fatal(err)
		}
		if err := coord.Release(ctx, "key", lease.ID); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// BenchmarkFencingRenew renews one live lease.
func BenchmarkFencingRenew(b *testing.B) {
	c := newClient(b)
	coord := newCoordinator(b, c, "bench:renew:")
	ctx := context.Background()
	lease, err := coord.Grant(ctx, "key", leaseTTL)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		if _, err := coord.Renew(ctx, "key", lease.ID, leaseTTL); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// BenchmarkFencingCheckToken checks the token of one live lease.
func BenchmarkFencingCheckToken(b *testing.B) {
	c := newClient(b)
	coord := newCoordinator(b, c, "bench:check:")
	ctx := context.Background()
	lease, err := coord.Grant(ctx, "key", leaseTTL)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		ok, err := coord.CheckToken(ctx, "key", lease.Token)
		if err != nil || !ok {
			b.Fatalf("CheckToken = %v, %v", ok, err)
		}
	}
	stop()
}

// BenchmarkRedislockObtainRelease obtains and releases a bsm/redislock lock.
func BenchmarkRedislockObtainRelease(b *testing.B) {
	c := newClient(b)
	locker := redislock.New(c)
	key := "bench:redislock:" + rand.Text()
	ctx := context.Background()
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		lock, err := locker.Obtain(ctx, key, leaseTTL, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// BenchmarkRedsyncLockUnlock locks and unlocks a redsync mutex on a single
// instance (one go-redis v9 pool), without retries.
func BenchmarkRedsyncLockUnlock(b *testing.B) {
	c := newClient(b)
	rs := redsync.New(redsyncgoredis.NewPool(c))
	key := "bench:redsync:" + rand.Text()
	ctx := context.Background()
	b.ReportAllocs()
	stop := measureCPU(b, c)
	for b.Loop() {
		m := rs.NewMutex(key, redsync.WithExpiry(leaseTTL), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			b.Fatal(err)
		}
		if ok, err := m.UnlockContext(ctx); err != nil || !ok {
			b.Fatalf("Unlock = %v, %v", ok, err)
		}
	}
	stop()
}

// BenchmarkParallel runs the same operations from GOMAXPROCS goroutines, each
// on a key of its own, to show throughput rather than latency.
func BenchmarkParallel(b *testing.B) {
	c := newClient(b)
	var goroutine atomic.Int64
	run := rand.Text()
	key := func() string { return run + ":" + strconv.FormatInt(goroutine.Add(1), 10) }
	runParallel := func(b *testing.B, body func(ctx context.Context, key string) error) {
		b.ReportAllocs()
		stop := measureCPU(b, c)
		defer stop()
		b.RunParallel(func(pb *testing.PB) {
			ctx, k := context.Background(), key()
			for pb.Next() {
				if err := body(ctx, k); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("Ping", func(b *testing.B) {
		runParallel(b, func(ctx context.Context, _ string) error { return c.Ping(ctx).Err() })
	})
	b.Run("FencingGrantRelease", func(b *testing.B) {
		coord := newCoordinator(b, c, "bench:pgr:")
		runParallel(b, func(ctx context.Context, k string) error {
			lease, err := coord.Grant(ctx, k, leaseTTL)
			if err != nil {
				return err
			}
			return coord.Release(ctx, k, lease.ID)
		})
	})
	checkCoord := newCoordinator(b, c, "bench:pcheck:")
	lease, err := checkCoord.Grant(context.Background(), "key", leaseTTL)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("FencingCheckToken", func(b *testing.B) {
		coord := checkCoord
		runParallel(b, func(ctx context.Context, _ string) error {
			ok, err := coord.CheckToken(ctx, "key", lease.Token)
			if err == nil && !ok {
				err = fmt.Errorf("token %d checked false", lease.Token)
			}
			return err
		})
	})
	b.Run("RedislockObtainRelease", func(b *testing.B) {
		locker := redislock.New(c)
		runParallel(b, func(ctx context.Context, k string) error {
			lock, err := locker.Obtain(ctx, "bench:predislock:"+k, leaseTTL, nil)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		})
	})
	b.Run("RedsyncLockUnlock", func(b *testing.B) {
		rs := redsync.New(redsyncgoredis.NewPool(c))
		runParallel(b, func(ctx context.Context, k string) error {
			m := rs.NewMutex("bench:predsync:"+k, redsync.WithExpiry(leaseTTL), redsync.WithTries(1))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			_, err := m.UnlockContext(ctx)
			return err
		})
	})
}
