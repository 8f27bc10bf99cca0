package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
	pool    pool      // unused etcd leases, see pool.go
	keeper  keeper    // the keep-alives that reuse them
	known   knownKeys // keys seen with an ID record, see known.go

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

// ErrNilClient is returned by New when the client is nil.
var ErrNilClient = errors.New("etcdbackend: nil client")

// New returns a backend that keeps its leases in etcd through cli. The
// backend never closes cli: the client, its endpoints, TLS and auth are the
// caller's. It talks to etcd over cli's connection with the client's own
// KV, Lease and Watch services, not through wrappers set on cli.KV,
// cli.Lease or cli.Watcher (such as clientv3/namespace): use WithPrefix to
// place its keys.
func New(cli *clientv3.Client, opts ...Option) (*Backend, error) {
	if cli == nil {
		return nil, ErrNilClient
	}
	b := &Backend{
		cli:     cli,
		prefix:  DefaultPrefix,
		kv:      clientv3.NewKVFromKVClient(trackedKV{revisionKV{clientv3.RetryKVClient(cli), new(atomic.Int64)}}, cli),
		leases:  clientv3.RetryLeaseClient(cli),
		watcher: clientv3.NewWatcher(cli),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.keeper = keeper{leases: b.leases, ctx: clientv3.WithRequireLeader(b.ctx)}
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

func (b *Backend) ready(ctx context.Context) error {
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
	return nil
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
// goroutines, and revokes the etcd leases it kept for reuse (waiting at most
// two seconds); it does not close the etcd client.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed.Store(true)
	b.mu.Unlock()
	b.cancel()
	b.subs.Wait()
	b.keeper.close()
	b.drainPool()
	err := b.watcher.Close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
