package natsbackend_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/contentiontest"
	"github.com/fencing-go/fencing/natsbackend"
	"github.com/fencing-go/fencing/natsbackend/natstest"
)

func TestMain(m *testing.M) {
	natstest.Main(m)
}

// quiet is the logger of the tests' backends: their single-server buckets
// (one replica) fail the safety check, which CheckWarn logs.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness runs the conformance suite on the shared server (or a cluster:
// see clusterHarness), each backend in a fresh bucket (an empty key space).
type harness struct {
	connect func(testing.TB) (*nats.Conn, jetstream.JetStream)
	bucket  func(testing.TB, jetstream.JetStream) string
	mu      sync.Mutex
	buckets map[backend.Backend]space
}

type space struct {
	js     jetstream.JetStream
	bucket string
}

func newHarness(t testing.TB) *harness {
	return &harness{connect: natstest.Shared(t).Connect, bucket: natstest.Bucket, buckets: make(map[backend.Backend]space)}
}

// open makes a backend on bucket of js, the safety check a warning (a
// single server's bucket has one replica).
func open(js jetstream.JetStream, bucket string, opts ...natsbackend.Option) (*natsbackend.Backend, error) {
	opts = append([]natsbackend.Option{natsbackend.WithSafetyCheck(backend.CheckWarn), natsbackend.WithLogger(quiet)}, opts...)
	return natsbackend.New(context.Background(), js, bucket, opts...)
}

func (h *harness) NewBackend(_ context.Context, t testing.TB) (backend.Backend, error) {
	_, js := h.connect(t)
	bucket := h.bucket(t, js)
	b, err := open(js, bucket)
	if err == nil {
		h.mu.Lock()
		h.buckets[b] = space{js, bucket}
		h.mu.Unlock()
	}
	return b, err
}

// NewObserver is a second backend on b's bucket, on a connection of its
// own: a process that has just started.
func (h *harness) NewObserver(_ context.Context, t testing.TB, b backend.Backend) (backend.Backend, error) {
	h.mu.Lock()
	sp := h.buckets[b]
	h.mu.Unlock()
	_, js := h.connect(t)
	return open(js, sp.bucket)
}

func (h *harness) Wait(ctx context.Context, d time.Duration) error {
	return conformance.Sleep(ctx, d)
}

// Traits: expiry is observed on the local monotonic clock, and a grant is
// two or three round trips to the server, which can take tens of
// milliseconds on a loaded machine.
func (h *harness) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: time.Second, Slack: 500 * time.Millisecond}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness(t))
}

// newBackend is a backend on a fresh bucket of the shared server, closed
// in t's cleanup.
func newBackend(t testing.TB) *natsbackend.Backend {
	t.Helper()
	_, js := natstest.Shared(t).Connect(t)
	b, err := open(js, natstest.Bucket(t, js))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestContention checks the spans and contention metrics of a contention
// on this backend (see contentiontest.Run).
func TestContention(t *testing.T) {
	contentiontest.Run(t, newHarness(t))
}

// BenchmarkConformance: grant+release, renew, token check, handoff and the
// parallel cases, on the shared server.
func BenchmarkConformance(b *testing.B) {
	conformance.RunBenchmarks(b, newHarness(b))
}
