package natsbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/backend"
)

// Backend is a fencing backend on one JetStream key-value bucket. Make one
// with New; it is safe for concurrent use.
type Backend struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	nc     *nats.Conn
	bucket string
	stream string // the bucket's stream, KV_<bucket>
	api    string // the JetStream API prefix, ending in a dot
	// timeout bounds a read whose context has no deadline: the
	// JetStream's DefaultTimeout, as its own requests are bounded.
	timeout time.Duration
	now     func() time.Time
	check   backend.CheckMode
	logger  *slog.Logger

	mu     sync.Mutex
	closed bool
	seen   map[string]observation // by key
}

var (
	_ backend.Backend        = (*Backend)(nil)
	_ backend.ObservedExpiry = (*Backend)(nil)
	_ backend.Notifier       = (*Backend)(nil)
	_ backend.Inspector      = (*Backend)(nil)
	_ backend.ForceReleaser  = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithClock sets the monotonic clock the backend observes records with
// (time.Now by default): a test's fake clock. It is the only clock that
// decides expiry (see the package documentation), so it must never jump.
func WithClock(now func() time.Time) Option {
	return func(b *Backend) { b.now = now }
}

// WithSafetyCheck sets what New does when its check fails (default
// backend.CheckRefuse; see backend's "Constructors and the safety check"
// and SafetyError for what is checked).
func WithSafetyCheck(mode backend.CheckMode) Option {
	return func(b *Backend) { b.check = mode }
}

// WithLogger sets where New logs a failed check under backend.CheckWarn,
// and what it cannot check (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(b *Backend) { b.logger = l }
}

// New returns a backend that keeps its leases in the key-value bucket
// named bucket, through js, in the shape every backend shares (see
// backend's "Constructors and the safety check"). It never closes js's
// connection. The bucket must exist: New does not create it, so that a
// bucket deleted by mistake is an error here instead of a new bucket whose
// revisions (and so tokens) start again from 1 (see the package
// documentation).
//
// New reads the bucket's stream configuration, bounded by ctx, and refuses
// (backend.CheckRefuse) a bucket that can lose acknowledged writes or drop
// live records: memory storage, a single replica, a MaxAge, a mirror or
// sources (see SafetyError). A server that does not answer fails with an
// error wrapping backend.ErrUnreachable; a missing bucket, a nil js or an
// empty bucket name wraps backend.ErrInvalidConfig.
func New(ctx context.Context, js jetstream.JetStream, bucket string, opts ...Option) (*Backend, error) {
	if js == nil {
		return nil, fmt.Errorf("natsbackend: %w: nil JetStream", backend.ErrInvalidConfig)
	}
	if bucket == "" {
		return nil, fmt.Errorf("natsbackend: %w: empty bucket name", backend.ErrInvalidConfig)
	}
	b := &Backend{
		js:      js,
		nc:      js.Conn(),
		bucket:  bucket,
		stream:  "KV_" + bucket,
		api:     apiPrefix(js.Options()),
		timeout: js.Options().DefaultTimeout,
		now:     time.Now,
		seen:    make(map[string]observation),
	}
	for _, o := range opts {
		o(b)
	}
	if err := b.check.Validate(); err != nil {
		return nil, fmt.Errorf("natsbackend: %w", err)
	}
	if b.now == nil {
		return nil, fmt.Errorf("natsbackend: %w: WithClock(nil)", backend.ErrInvalidConfig)
	}
	if b.nc == nil {
		return nil, fmt.Errorf("natsbackend: %w: JetStream has no connection", backend.ErrInvalidConfig)
	}
	if b.logger == nil {
		b.logger = slog.Default()
	}
	if b.timeout <= 0 {
		b.timeout = 5 * time.Second
	}
	kv, err := js.KeyValue(ctx, bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, fmt.Errorf("natsbackend: bucket %q: %w: %w (create it first; New never does)", bucket, backend.ErrInvalidConfig, err)
	case err != nil:
		return nil, fmt.Errorf("natsbackend: bucket %q: %w", bucket, connErr(err))
	}
	b.kv = kv
	if b.check != backend.CheckSkip {
		if err := b.probe(ctx); err != nil {
			if b.check == backend.CheckRefuse || errors.Is(err, backend.ErrAuthRefused) || errors.Is(err, backend.ErrPermissionDenied) {
				return nil, err
			}
			b.logger.Warn("natsbackend: safety check failed; going on (CheckWarn)", "error", err)
		} else {
			b.logger.Warn(syncUnseen)
		}
	}
	return b, nil
}

// apiPrefix is the JetStream API prefix of o, ending in a dot.
func apiPrefix(o jetstream.JetStreamOptions) string {
	p := o.APIPrefix
	if p == "" {
		p = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(p, ".") {
		p += "."
	}
	return p
}

// connErr classifies an error of New's requests.
func connErr(err error) error {
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired):
		return fmt.Errorf("%w: %w", backend.ErrAuthRefused, err)
	case errors.Is(err, nats.ErrPermissionViolation):
		return fmt.Errorf("%w: %w", backend.ErrPermissionDenied, err)
	}
	return fmt.Errorf("%w: %w", backend.ErrUnreachable, err)
}

// ObservedExpiry marks the backend as one whose store has no clock that
// can end a lease: see backend.ObservedExpiry.
func (b *Backend) ObservedExpiry() {}

// Close marks the backend closed; later calls return backend.ErrClosed. It
// does not close the connection, and ends no Subscription (each has its
// own Close).
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// ready opens every operation: it returns backend.ErrClosed after Close,
// then ctx's error (wrapped), then args: the error of the operation's
// argument check, a backend.Check function called on the operation's
// arguments (nil for an operation with none to check). The backends are
// the one layer that checks arguments, and this is where each operation
// does; a call refused here sends and changes nothing.
func (b *Backend) ready(ctx context.Context, args error) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("natsbackend: %w", err)
	}
	return args
}

// Bucket is the name of the bucket the backend keeps its leases in.
func (b *Backend) Bucket() string { return b.bucket }
