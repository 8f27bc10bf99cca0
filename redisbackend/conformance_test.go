package redisbackend_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/contentiontest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// harness runs the conformance suite on a real Redis, a standalone server
// or a Cluster; every backend gets a fresh key prefix on it.
type harness struct {
	client redis.UniversalClient
	name   string // of the prefixes
	opts   []redisbackend.Option
	n      atomic.Int64
	spaces sync.Map // backend.Backend → its prefix, for Reopen
}

func newHarness(t testing.TB) *harness {
	// AOF with fsync every second: persistent enough for the default
	// configuration check, fast enough for benchmarks.
	srv := redistest.Start(t, redistest.Config{AppendOnly: true, AppendFsync: "everysec"})
	return &harness{client: srv.Client(), name: "conformance"}
}

func (h *harness) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	prefix := fmt.Sprintf("%s%d:", h.name, h.n.Add(1))
	b, err := h.newBackend(ctx, h.client, prefix)
	if err == nil {
		h.spaces.Store(b, prefix)
	}
	return b, err
}

func (h *harness) newBackend(ctx context.Context, client redis.UniversalClient, prefix string) (backend.Backend, error) {
	opts := append([]redisbackend.Option{redisbackend.WithPrefix(prefix), redisbackend.WithLogger(quietLogger())}, h.opts...)
	return redisbackend.New(ctx, client, opts...)
}

// Reopen implements conformance.Reopener: a backend on b's prefix, with a
// client of its own on a standalone server.
func (h *harness) Reopen(ctx context.Context, t testing.TB, b backend.Backend) (backend.Backend, error) {
	prefix, ok := h.spaces.Load(b)
	if !ok {
		return nil, fmt.Errorf("Reopen: a backend NewBackend did not make")
	}
	client := h.client
	if c, ok := h.client.(*redis.Client); ok {
		c = redis.NewClient(c.Options())
		t.Cleanup(func() { c.Close() })
		client = c
	}
	return h.newBackend(ctx, client, prefix.(string))
}

// NewManyBackend implements conformance.ManyHarness: a prefix with a hash
// tag keeps the backend's keys in one Cluster slot, so GrantMany can take
// any of them.
func (h *harness) NewManyBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	opts := append([]redisbackend.Option{
		redisbackend.WithPrefix(fmt.Sprintf("{%s%d}:", h.name, h.n.Add(1))),
		redisbackend.WithLogger(quietLogger()),
	}, h.opts...)
	return redisbackend.New(ctx, h.client, opts...)
}

func (h *harness) Wait(ctx context.Context, d time.Duration) error {
	return conformance.Sleep(ctx, d)
}

func (h *harness) Traits() conformance.Traits {
	return conformance.Traits{
		// The server's clock decides expiry to the microsecond; the leases
		// are long enough that a busy test machine still sees them live
		// right after a grant.
		MinTTL: 400 * time.Millisecond,
		// Only clock-rate differences between this process's monotonic
		// clock and the server's TIME, and microsecond rounding.
		Slack:       5 * time.Millisecond,
		DenseTokens: true,
		MaxToken:    redisbackend.MaxToken,
	}
}

// NewBackendWithRetention implements conformance.Retainer.
func (h *harness) NewBackendWithRetention(ctx context.Context, t testing.TB, d time.Duration) (backend.Backend, error) {
	opts := append([]redisbackend.Option{
		redisbackend.WithPrefix(fmt.Sprintf("%s%d:", h.name, h.n.Add(1))),
		redisbackend.WithLogger(quietLogger()),
		redisbackend.WithRetention(d),
	}, h.opts...)
	return redisbackend.New(ctx, h.client, opts...)
}

// Records implements conformance.Retainer: the backend's records, counted
// by its Size (a SCAN of its prefix).
func (h *harness) Records(ctx context.Context, b backend.Backend) (int, error) {
	st, err := b.(backend.Sizer).Size(ctx)
	return int(st.Records), err
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness(t))
}

// TestContention checks the spans and contention metrics of a contention
// on this backend (see contentiontest.Run).
func TestContention(t *testing.T) {
	contentiontest.Run(t, newHarness(t))
}

// TestConformanceBatched runs the suite with every request sent by the
// backend's batch sender (see "Concurrent requests share round trips" in
// docs/redis.md), which otherwise takes over only beyond
// DirectInFlight requests in flight.
func TestConformanceBatched(t *testing.T) {
	h := newHarness(t)
	h.name, h.opts = "batched", []redisbackend.Option{redisbackend.WithEveryRequestBatched()}
	conformance.Run(t, h)
}

func BenchmarkConformance(b *testing.B) {
	conformance.RunBenchmarks(b, newHarness(b))
}
