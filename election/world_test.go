package election_test

import (
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/etcdtest"
	"github.com/fencing-go/fencing/internal/redistest"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/redisbackend"
)

// A world is one backend the election tests run on: candidates are
// Coordinators of their own (a connection each, as separate processes
// would have) over one store.
type world struct {
	name string
	// ttl is the terms' TTL: etcd's are whole seconds.
	ttl time.Duration
	// coordinator returns a new candidate's Coordinator.
	coordinator func(t *testing.T) *fencing.Coordinator
	// clock is the memory world's fake clock; nil on real servers.
	clock *memorybackend.FakeClock
	// etcd is the etcd world's member, for coordinators behind a proxy.
	etcd *etcdtest.Member
	// redis is the Redis world's server.
	redis *redistest.Server
	// prefix is the real server's key prefix.
	prefix string
}

var prefixes atomic.Int64

func prefix(name string) string {
	return fmt.Sprintf("election-test/%s/%d/%d/", name, os.Getpid(), prefixes.Add(1))
}

func memoryWorld(t *testing.T) world {
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := memorybackend.New(memorybackend.WithClock(clock))
	t.Cleanup(func() { b.Close() })
	return world{name: "memory", ttl: 3 * time.Second, clock: clock, coordinator: func(t *testing.T) *fencing.Coordinator {
		return fencing.New(b, fencing.WithDefaultMargin(time.Second))
	}}
}

func etcdWorld(t *testing.T) world {
	m := etcdtest.Start(t)
	p := prefix("etcd")
	return world{name: "etcd", ttl: time.Second, etcd: m, prefix: p, coordinator: func(t *testing.T) *fencing.Coordinator {
		return etcdCoordinator(t, m.Endpoints(), p)
	}}
}

func etcdCoordinator(t *testing.T, endpoints []string, prefix string) *fencing.Coordinator {
	b, err := etcdbackend.New(etcdtest.NewClient(t, endpoints), etcdbackend.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return fencing.New(b, fencing.WithDefaultMargin(500*time.Millisecond))
}

func redisWorld(t *testing.T) world {
	s := redistest.Start(t, redistest.Config{AppendOnly: true})
	p := prefix("redis")
	return world{name: "redis", ttl: time.Second, redis: s, prefix: p, coordinator: func(t *testing.T) *fencing.Coordinator {
		return redisCoordinator(t, s.Addr(), p)
	}}
}

func redisCoordinator(t testing.TB, addr, prefix string) *fencing.Coordinator {
	client := redis.NewClient(&redis.Options{Addr: addr})
	b, err := redisbackend.New(client, redisbackend.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); client.Close() })
	return fencing.New(b, fencing.WithDefaultMargin(500*time.Millisecond))
}

// worlds runs f on every backend. Real servers are skipped in -short mode
// and, outside CI, when not installed (redistest says so).
func worlds(t *testing.T, f func(t *testing.T, w world)) {
	t.Run("memory", func(t *testing.T) { f(t, memoryWorld(t)) })
	if testing.Short() {
		t.Log("-short: memory only")
		return
	}
	t.Run("etcd", func(t *testing.T) { f(t, etcdWorld(t)) })
	t.Run("redis", func(t *testing.T) { f(t, redisWorldOrSkip(t)) })
}

// redisWorldOrSkip is redisWorld, skipped outside CI without redis-server.
func redisWorldOrSkip(t *testing.T) world {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("REDIS_SERVER") == "" && os.Getenv("CI") == "" {
		t.Skip("redis-server not found (install Redis 7 or set REDIS_SERVER)")
	}
	return redisWorld(t)
}

// holdOpts are the candidates' options: a fast fallback poll, so that a
// waiter on the memory world, whose expiry is never announced, sees it
// soon after the fake clock moves.
func holdOpts() []fencing.HoldOption {
	return []fencing.HoldOption{fencing.WithPollInterval(fencing.MinPollInterval)}
}
