package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

// DefaultPrefix is the prefix of every etcd key the backend writes, unless
// WithPrefix gives another.
const DefaultPrefix = "fencing/"

// Backend is the etcd backend. It is safe for concurrent use. The zero value
// is not usable; call New.
type Backend struct {
	cli     *clientv3.Client
	prefix  string
	kv      clientv3.KV      // the client's KV service, tracking whether a Txn left
	leases  pb.LeaseClient   // the client's Lease service, for keepAliveOnce
	watcher clientv3.Watcher // the backend's own watch stream, closed by Close
	closed  atomic.Bool
	pool    pool        // unused etcd leases, see pool.go
	keeper  keeper      // the keep-alives that reuse them
	known   knownKeys   // keys seen with an ID record, see known.go
	entries entryLeases // the etcd leases of the line entries it made, see queue.go
	check   backend.CheckMode
	logger  *slog.Logger

	retention time.Duration // 0: records are kept for ever
	sweep     sweeper       // reclaims idle keys, see retention.go

	// Subscriptions: their goroutines run under ctx, which Close cancels.
	mu     sync.Mutex // guards closed against new subscriptions
	ctx    context.Context
	cancel context.CancelFunc
	subs   sync.WaitGroup
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.Notifier      = (*Backend)(nil)
	_ backend.Inspector     = (*Backend)(nil)
	_ backend.ForceReleaser = (*Backend)(nil)
	_ backend.Lister        = (*Backend)(nil)
	_ backend.Queuer        = (*Backend)(nil)
	_ backend.Sizer         = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the prefix of the backend's etcd keys (default
// DefaultPrefix). Backends with different prefixes share nothing, as long as
// neither prefix is the other followed by the base64url encoding of a key
// (end prefixes with a '/' to be sure).
func WithPrefix(prefix string) Option {
	return func(b *Backend) { b.prefix = prefix }
}

// WithSafetyCheck sets what New does when its check fails (default
// backend.CheckRefuse; see backend's "Constructors and the safety check").
// etcd keeps what it acknowledges (a Raft majority wrote it), so the check
// is that cli reaches a cluster with a leader and may read the prefix.
func WithSafetyCheck(mode backend.CheckMode) Option {
	return func(b *Backend) { b.check = mode }
}

// WithLogger sets where New logs a failed check under backend.CheckWarn
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(b *Backend) { b.logger = l }
}

// New returns a backend that keeps its leases in etcd through cli, in the
// shape every backend shares (see backend's "Constructors and the safety
// check"). The backend never closes cli: the client, its endpoints, TLS
// and auth are the caller's. It talks to etcd over cli's connection with
// the client's own KV, Lease and Watch services, not through wrappers set
// on cli.KV, cli.Lease or cli.Watcher (such as clientv3/namespace): use
// WithPrefix to place its keys.
//
// New first checks that cli reaches etcd, with one linearizable read of
// the prefix (so a cluster with no leader, or a user without read
// permission on the prefix, fails it too), bounded by ctx alone: the etcd
// client waits for a ready connection for as long as ctx allows, so give
// ctx a deadline. An endpoint that does not answer in time, or is not
// etcd, fails New with an error wrapping backend.ErrUnreachable; refused
// credentials or permission wrap backend.ErrAuthRefused or
// backend.ErrPermissionDenied; a nil cli wraps backend.ErrInvalidConfig.
func New(ctx context.Context, cli *clientv3.Client, opts ...Option) (*Backend, error) {
	if cli == nil {
		return nil, fmt.Errorf("etcdbackend: %w: nil client", backend.ErrInvalidConfig)
	}
	b := &Backend{cli: cli, prefix: DefaultPrefix, retention: DefaultRetention}
	for _, o := range opts {
		o(b)
	}
	if err := b.check.Validate(); err != nil {
		return nil, fmt.Errorf("etcdbackend: %w", err)
	}
	if b.logger == nil {
		b.logger = slog.Default()
	}
	if b.check != backend.CheckSkip {
		if err := b.probe(ctx); err != nil {
			if b.check == backend.CheckRefuse || errors.Is(err, backend.ErrAuthRefused) || errors.Is(err, backend.ErrPermissionDenied) {
				return nil, err
			}
			b.logger.Warn("etcdbackend: safety check failed; going on (CheckWarn)", "error", err)
		}
	}
	b.kv = clientv3.NewKVFromKVClient(trackedKV{revisionKV{clientv3.RetryKVClient(cli), new(atomic.Int64)}}, cli)
	b.leases = clientv3.RetryLeaseClient(cli)
	b.watcher = clientv3.NewWatcher(cli)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.keeper = keeper{leases: b.leases, ctx: clientv3.WithRequireLeader(b.ctx)}
	b.startSweep()
	return b, nil
}

// probe reads the prefix's own key once, linearizably.
func (b *Backend) probe(ctx context.Context) error {
	if b.cli.Ctx().Err() != nil {
		return errClientClosed
	}
	_, err := b.cli.Get(clientv3.WithRequireLeader(ctx), b.prefix, clientv3.WithCountOnly())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrAuthNotEnabled):
		return fmt.Errorf("etcdbackend: checking etcd at %v: %w: %w", b.cli.Endpoints(), backend.ErrAuthRefused, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcdbackend: checking etcd at %v: %w: %w", b.cli.Endpoints(), backend.ErrPermissionDenied, err)
	case ctx.Err() != nil, errors.Is(err, rpctypes.ErrNoLeader):
		return fmt.Errorf("etcdbackend: %w: no answer from %v: %w", backend.ErrUnreachable, b.cli.Endpoints(), err)
	}
	return fmt.Errorf("etcdbackend: checking etcd at %v: %w", b.cli.Endpoints(), err)
}

// ready opens every operation: it returns ctx's error, then
// backend.ErrClosed after Close or the etcd client's, then args: the error of the operation's
// argument check, a backend.Check function called on the operation's
// arguments (nil for an operation with none to check). The backends are
// the one layer that checks arguments (the Coordinator and the conformance
// suite rely on it), and this is where each operation does; a call refused
// here sends and changes nothing.
func (b *Backend) ready(ctx context.Context, args error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return backend.ErrClosed
	}
	if b.cli.Ctx().Err() != nil {
		// Without this, the etcd client would resend to its closed
		// connection for seconds before giving up.
		return errClientClosed
	}
	return args
}

// errClientClosed is returned after the etcd client was closed: the backend
// cannot go on either.
var errClientClosed = fmt.Errorf("%w: the etcd client is closed", backend.ErrClosed)

// revoke revokes an etcd lease that the backend no longer needs. A failure
// is not reported: the lease has no keys, or keys that are ours to lose, and
// ends by itself after its TTL.
func (b *Backend) revoke(ctx context.Context, id clientv3.LeaseID) {
	_, _ = b.cli.Revoke(ctx, id)
}

// Close implements backend.Backend. Later calls return backend.ErrClosed.
// It ends every Subscription (closing its channel) and waits for their
// goroutines, ends the reclaiming sweep (WithRetention) and waits for it,
// and revokes the etcd leases it kept for reuse (waiting at most
// two seconds); it does not close the etcd client.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed.Store(true)
	b.mu.Unlock()
	b.cancel()
	b.subs.Wait()
	if b.sweep.done != nil {
		<-b.sweep.done
	}
	b.keeper.close()
	b.drainPool()
	err := b.watcher.Close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
