// Package recipetest runs the tests of the recipes over a Coordinator
// (packages election and semaphore) on every backend: the in-memory one on
// a fake clock, an etcd member and a redis-server as child processes, a
// SQLite file and a PostgreSQL child process.
package recipetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/redisbackend"
)

// A World is one store. Each "process" of a test is a Coordinator over a
// backend of its own (a connection each) on that store; on memory they
// share the one backend.
type World struct {
	Name string
	// TTL is a short lease's TTL on this store (etcd's are whole seconds).
	TTL time.Duration
	// Margin is the Coordinators' default margin.
	Margin time.Duration
	// Clock is the memory world's fake clock; nil on real servers.
	Clock *memorybackend.FakeClock
	// Etcd is the etcd world's member; nil elsewhere.
	Etcd *etcdtest.Member
	// Redis is the Redis world's server; nil elsewhere.
	Redis *redistest.Server
	// Prefix is the real server's key prefix.
	Prefix string
	// DSN is the SQL server's data source name; "" elsewhere.
	DSN string
	// NewBackend returns a new process's backend, closed when t ends.
	NewBackend func(t *testing.T) backend.Backend
}

// Coordinator returns a new process's Coordinator.
func (w World) Coordinator(t *testing.T) *fencing.Coordinator {
	return fencing.New(w.NewBackend(t), fencing.WithDefaultMargin(w.Margin))
}

// Elapse lets d pass on the store's clock: the fake clock moves at once, a
// real server's time passes.
func (w World) Elapse(d time.Duration) {
	if w.Clock != nil {
		w.Clock.Advance(d)
		return
	}
	time.Sleep(d)
}

var prefixes atomic.Int64

// Memory returns the in-memory world on a fake clock.
func Memory(t *testing.T) World {
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := memorybackend.New(memorybackend.WithClock(clock))
	t.Cleanup(func() { b.Close() })
	return World{Name: "memory", TTL: 3 * time.Second, Margin: time.Second, Clock: clock,
		NewBackend: func(*testing.T) backend.Backend { return b }}
}

// Etcd returns a world on an etcd member of its own.
func Etcd(t *testing.T) World {
	m := etcdtest.Start(t)
	p := fmt.Sprintf("recipe-test/%d/%d/", os.Getpid(), prefixes.Add(1))
	return World{Name: "etcd", TTL: time.Second, Margin: 500 * time.Millisecond, Etcd: m, Prefix: p,
		NewBackend: func(t *testing.T) backend.Backend { return EtcdBackend(t, m.Endpoints(), p) }}
}

// EtcdBackend returns a backend on endpoints (a member, or a proxy in front
// of it) with prefix, closed when t ends.
func EtcdBackend(t testing.TB, endpoints []string, prefix string) backend.Backend {
	b, err := etcdbackend.New(context.Background(), etcdtest.NewClient(t, endpoints), etcdbackend.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Redis returns a world on a redis-server of its own. Without redis-server
// it skips the test, except in CI, where that is a failure.
func Redis(t *testing.T) World {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("REDIS_SERVER") == "" && os.Getenv("CI") == "" {
		t.Skip("redis-server not found (install Redis 7 or set REDIS_SERVER)")
	}
	s := redistest.Start(t, redistest.Config{AppendOnly: true})
	p := fmt.Sprintf("recipe-test/%d/%d/", os.Getpid(), prefixes.Add(1))
	return World{Name: "redis", TTL: time.Second, Margin: 500 * time.Millisecond, Redis: s, Prefix: p,
		NewBackend: func(t *testing.T) backend.Backend { return RedisBackend(t, s.Addr(), p) }}
}

// RedisBackend returns a backend on the Redis server at addr with prefix,
// over a client of its own; both are closed when t ends.
func RedisBackend(t testing.TB, addr, prefix string) backend.Backend {
	client := redis.NewClient(&redis.Options{Addr: addr})
	b, err := redisbackend.New(context.Background(), client, redisbackend.WithPrefix(prefix))
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); client.Close() })
	return b
}

// Each runs f on every world: memory, then etcd, Redis, SQLite and
// PostgreSQL (not with -short).
func Each(t *testing.T, f func(t *testing.T, w World)) {
	t.Run("memory", func(t *testing.T) { f(t, Memory(t)) })
	if testing.Short() {
		t.Log("-short: memory only")
		return
	}
	t.Run("etcd", func(t *testing.T) { f(t, Etcd(t)) })
	t.Run("redis", func(t *testing.T) { f(t, Redis(t)) })
	t.Run("sqlite", func(t *testing.T) { f(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { f(t, Postgres(t)) })
}
