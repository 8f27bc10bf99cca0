package kubebackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	check     backend.CheckMode
	logger    *slog.Logger
	log       ObservationLog
	retention time.Duration

	reclaimed atomic.Uint64      // Leases deleted by the sweep since New
	stopSweep context.CancelFunc // nil when the retention is off
	sweepDone chan struct{}      // closed when the sweep's goroutine has ended

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
	_ backend.Sizer          = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithClock sets the monotonic clock the backend observes Leases with
// (time.Now by default): a test's fake clock. It is the only clock that
// decides expiry (see the package documentation), so it must never jump.
func WithClock(now func() time.Time) Option {
	return func(b *Backend) { b.now = now }
}

// WithSafetyCheck sets what New does when its check fails (default
// backend.CheckRefuse; see backend's "Constructors and the safety check").
// The API server keeps what it acknowledges (etcd beneath it), so the check
// is that client reaches it and may list the namespace's Leases.
func WithSafetyCheck(mode backend.CheckMode) Option {
	return func(b *Backend) { b.check = mode }
}

// WithLogger sets where New logs a failed check under backend.CheckWarn,
// and where the reclaiming goroutine (WithRetention) logs that its passes
// fail and that they work again (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(b *Backend) { b.logger = l }
}

// New returns a backend that keeps its leases as Lease objects in
// namespace, through client, in the shape every backend shares (see
// backend's "Constructors and the safety check"). It never closes client.
// The namespace must exist; the client's identity needs get, list, watch,
// create, update and (for WithRetention, on by default) delete on leases
// there (see docs/kubernetes.md for the Role).
//
// New first lists one Lease of the namespace, bounded by ctx: an API
// server that does not answer fails New with an error wrapping
// backend.ErrUnreachable, refused credentials or permission with
// backend.ErrAuthRefused or backend.ErrPermissionDenied. A nil client or
// an empty namespace wraps backend.ErrInvalidConfig.
func New(ctx context.Context, client kubernetes.Interface, namespace string, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("kubebackend: %w: nil client", backend.ErrInvalidConfig)
	}
	if namespace == "" {
		return nil, fmt.Errorf("kubebackend: %w: empty namespace", backend.ErrInvalidConfig)
	}
	b := &Backend{
		leases:    client.CoordinationV1().Leases(namespace),
		namespace: namespace,
		now:       time.Now,
		retention: DefaultRetention,
		seen:      make(map[string]observation),
	}
	for _, o := range opts {
		o(b)
	}
	if err := b.check.Validate(); err != nil {
		return nil, fmt.Errorf("kubebackend: %w", err)
	}
	if b.now == nil {
		return nil, fmt.Errorf("kubebackend: %w: WithClock(nil)", backend.ErrInvalidConfig)
	}
	if b.logger == nil {
		b.logger = slog.Default()
	}
	if b.check != backend.CheckSkip {
		if err := b.probe(ctx); err != nil {
			if b.check == backend.CheckRefuse || errors.Is(err, backend.ErrAuthRefused) || errors.Is(err, backend.ErrPermissionDenied) {
				return nil, err
			}
			b.logger.Warn("kubebackend: safety check failed; going on (CheckWarn)", "error", err)
		}
	}
	b.startSweep()
	return b, nil
}

// probe lists one Lease of the namespace.
func (b *Backend) probe(ctx context.Context) error {
	_, err := b.leases.List(ctx, metav1.ListOptions{Limit: 1})
	switch {
	case err == nil:
		return nil
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("kubebackend: checking namespace %q: %w: %w", b.namespace, backend.ErrAuthRefused, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubebackend: checking namespace %q: %w: %w", b.namespace, backend.ErrPermissionDenied, err)
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code < 500 {
		return fmt.Errorf("kubebackend: checking namespace %q: %w", b.namespace, err)
	}
	return fmt.Errorf("kubebackend: checking namespace %q: %w: %w", b.namespace, backend.ErrUnreachable, err)
}

// ObservedExpiry marks the backend as one whose store has no clock: see
// backend.ObservedExpiry.
func (b *Backend) ObservedExpiry() {}

// Close marks the backend closed; later calls return backend.ErrClosed. It
// ends the reclaiming goroutine (WithRetention), interrupting a pass, and
// returns once it has ended. It does not close the client, and ends no
// Subscription (each has its own Close).
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	if b.stopSweep != nil {
		b.stopSweep()
		<-b.sweepDone
	}
	return nil
}

// ready opens every operation: it returns backend.ErrClosed after Close,
// then ctx's error (wrapped), then args: the error of the operation's
// argument check, a backend.Check function called on the operation's
// arguments (nil for an operation with none to check). The backends are
// the one layer that checks arguments (the Coordinator and the conformance
// suite rely on it), and this is where each operation does; a call refused
// here sends and changes nothing.
func (b *Backend) ready(ctx context.Context, args error) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kubebackend: %w", err)
	}
	return args
}

// Namespace is the namespace the backend keeps its Leases in.
func (b *Backend) Namespace() string { return b.namespace }
