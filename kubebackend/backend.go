package kubebackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	coordv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/fencing-go/fencing/backend"
)

// Backend is a fencing backend on coordination.k8s.io/v1 Leases in one
// namespace. Make one with New; it is safe for concurrent use.
type Backend struct {
	leases    coordv1.LeaseInterface
	namespace string
	now       func() time.Time

	mu     sync.Mutex
	closed bool
	seen   map[string]observation // by Lease name
}

var (
	_ backend.Backend        = (*Backend)(nil)
	_ backend.ObservedExpiry = (*Backend)(nil)
	_ backend.Notifier       = (*Backend)(nil)
	_ backend.Inspector      = (*Backend)(nil)
	_ backend.ForceReleaser  = (*Backend)(nil)
	_ backend.Lister         = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithClock sets the monotonic clock the backend observes Leases with
// (time.Now by default): a test's fake clock. It is the only clock that
// decides expiry (see the package documentation), so it must never jump.
func WithClock(now func() time.Time) Option {
	return func(b *Backend) { b.now = now }
}

// New returns a backend that keeps its leases as Lease objects in
// namespace, through client. It never closes client. The namespace must
// exist; the client's identity needs get, list, watch, create and update on
// leases there (see docs/kubernetes.md for the Role).
func New(client kubernetes.Interface, namespace string, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, errors.New("kubebackend: nil client")
	}
	if namespace == "" {
		return nil, errors.New("kubebackend: empty namespace")
	}
	b := &Backend{
		leases:    client.CoordinationV1().Leases(namespace),
		namespace: namespace,
		now:       time.Now,
		seen:      make(map[string]observation),
	}
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

// ObservedExpiry marks the backend as one whose store has no clock: see
// backend.ObservedExpiry.
func (b *Backend) ObservedExpiry() {}

// Close marks the backend closed; later calls return backend.ErrClosed. It
// does not close the client, and ends no Subscription (each has its own
// Close).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// start fails with backend.ErrClosed after Close and with ctx's error when
// ctx is done, so that neither changes anything.
func (b *Backend) start(ctx context.Context) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kubebackend: %w", err)
	}
	return nil
}

// Namespace is the namespace the backend keeps its Leases in.
func (b *Backend) Namespace() string { return b.namespace }
