package kubebackend_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/contentiontest"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

func TestMain(m *testing.M) {
	kubetest.Main(m)
}

// harness runs the conformance suite on the shared API server, each
// backend in a fresh namespace (an empty key space) as the limited user.
type harness struct {
	srv *kubetest.Server
	mu  sync.Mutex
	// spaces keeps each backend's namespace and client, for NewObserver.
	spaces map[backend.Backend]space
}

type space struct {
	ns     string
	client kubernetes.Interface
}

func newHarness(t testing.TB) *harness {
	return &harness{srv: kubetest.Shared(t), spaces: make(map[backend.Backend]space)}
}

func (h *harness) NewBackend(_ context.Context, t testing.TB) (backend.Backend, error) {
	return h.newBackend(t)
}

// NewBackendWithRetention implements conformance.Retainer.
func (h *harness) NewBackendWithRetention(_ context.Context, t testing.TB, d time.Duration) (backend.Backend, error) {
	return h.newBackend(t, kubebackend.WithRetention(d))
}

// Records implements conformance.Retainer: the Leases of b's namespace
// that carry the backend's label.
func (h *harness) Records(ctx context.Context, b backend.Backend) (int, error) {
	st, err := b.(backend.Sizer).Size(ctx)
	return int(st.Records), err
}

func (h *harness) newBackend(t testing.TB, opts ...kubebackend.Option) (backend.Backend, error) {
	ns, client := h.srv.Namespace(t)
	b, err := kubebackend.New(context.Background(), client, ns, opts...)
	if err == nil {
		h.mu.Lock()
		h.spaces[b] = space{ns, client}
		h.mu.Unlock()
	}
	return b, err
}

// NewObserver is a second backend on b's namespace: a process that has
// just started.
func (h *harness) NewObserver(_ context.Context, t testing.TB, b backend.Backend) (backend.Backend, error) {
	h.mu.Lock()
	sp := h.spaces[b]
	h.mu.Unlock()
	return kubebackend.New(context.Background(), sp.client, sp.ns)
}

func (h *harness) Wait(ctx context.Context, d time.Duration) error {
	return conformance.Sleep(ctx, d)
}

// Traits: expiry is observed to the millisecond on the local clock, but
// every grant is two or three API round trips, which take hundreds of
// milliseconds on a loaded machine, so expiring leases are 2s long.
func (h *harness) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: 2 * time.Second, Slack: 500 * time.Millisecond}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness(t))
}

// TestContention checks the spans and contention metrics of a contention
// on this backend (see contentiontest.Run).
func TestContention(t *testing.T) {
	contentiontest.Run(t, newHarness(t))
}

func metaName(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

// dropping turns on the lost-reply fault of TestLostReplyIsOutcomeUnknown.
var dropping atomic.Bool

// BenchmarkConformance: grant+release, renew, token check, handoff and the
// parallel cases, on the shared API server (docs/kubernetes.md's table).
func BenchmarkConformance(b *testing.B) {
	conformance.RunBenchmarks(b, newHarness(b))
}
