package semaphore_test

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
	"github.com/fencing-go/fencing/internal/etcdtest"
	"github.com/fencing-go/fencing/internal/redistest"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/redisbackend"
)

// A world is one backend the tests run on; each "process" is a Coordinator
// over a backend of its own (a connection each) on one store.
type world struct {
	name    string
	ttl     time.Duration                      // a short permit's TTL (etcd: whole seconds)
	backend func(t *testing.T) backend.Backend // a new process's backend
	clock   *memorybackend.FakeClock           // memory only
	// elapse lets d pass on the coordinator's clock.
	elapse func(d time.Duration)
}

var prefixes atomic.Int64

func memoryWorld(t *testing.T) world {
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := memorybackend.New(memorybackend.WithClock(clock))
	t.Cleanup(func() { b.Close() })
	return world{name: "memory", ttl: 2 * time.Second, clock: clock,
		backend: func(*testing.T) backend.Backend { return b },
		elapse:  clock.Advance}
}

func etcdWorld(t *testing.T) world {
	m := etcdtest.Start(t)
	p := fmt.Sprintf("semaphore-test/%d/", prefixes.Add(1))
	return world{name: "etcd", ttl: time.Second, elapse: func(d time.Duration) { time.Sleep(d) },
		backend: func(t *testing.T) backend.Backend {
			b, err := etcdbackend.New(etcdtest.NewClient(t, m.Endpoints()), etcdbackend.WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}}
}

func redisWorld(t *testing.T) world {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("REDIS_SERVER") == "" && os.Getenv("CI") == "" {
		t.Skip("redis-server not found (install Redis 7 or set REDIS_SERVER)")
	}
	s := redistest.Start(t, redistest.Config{AppendOnly: true})
	p := fmt.Sprintf("semaphore-test/%d/", prefixes.Add(1))
	return world{name: "redis", ttl: time.Second, elapse: func(d time.Duration) { time.Sleep(d) },
		backend: func(t *testing.T) backend.Backend {
			client := redis.NewClient(&redis.Options{Addr: s.Addr()})
			b, err := redisbackend.New(client, redisbackend.WithPrefix(p))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close(); client.Close() })
			return b
		}}
}

func (w world) coordinator(t *testing.T) *fencing.Coordinator {
	return fencing.New(w.backend(t), fencing.WithDefaultMargin(500*time.Millisecond))
}

// worlds runs f on every backend; real servers not in -short mode.
func worlds(t *testing.T, f func(t *testing.T, w world)) {
	t.Run("memory", func(t *testing.T) { f(t, memoryWorld(t)) })
	if testing.Short() {
		t.Log("-short: memory only")
		return
	}
	t.Run("etcd", func(t *testing.T) { f(t, etcdWorld(t)) })
	t.Run("redis", func(t *testing.T) { f(t, redisWorld(t)) })
}

// counting wraps a backend and counts its grants, passing on the optional
// capabilities the semaphore uses.
type counting struct {
	backend.Backend
	grants atomic.Int64
}

func (c *counting) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	c.grants.Add(1)
	return c.Backend.Grant(ctx, req)
}

func (c *counting) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	return c.Backend.(backend.Notifier).NotifyFree(ctx, key)
}

func (c *counting) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	return c.Backend.(backend.Inspector).Inspect(ctx, key)
}

func (c *counting) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	return c.Backend.(backend.Lister).List(ctx, prefix, cursor, limit)
}
