package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
)

// MaxToken is the largest token this backend mints: Redis integers are
// signed 64-bit.
const MaxToken = math.MaxInt64

// DefaultPrefix is the prefix of every Redis key the backend uses, unless
// WithPrefix sets another.
const DefaultPrefix = "fencing:"

// The optional capabilities of package backend, all implemented.
var (
	_ backend.Notifier      = (*Backend)(nil)
	_ backend.Inspector     = (*Backend)(nil)
	_ backend.ForceReleaser = (*Backend)(nil)
	_ backend.Lister        = (*Backend)(nil)
	_ backend.Queuer        = (*Backend)(nil)
	_ backend.Sizer         = (*Backend)(nil)
)

// Backend is a fencing backend on Redis. It is safe for concurrent use.
// The zero value is not usable; call New.
type Backend struct {
	client      redis.UniversalClient
	prefix      string
	minReplicas int
	waitTimeout time.Duration
	checkMode   backend.CheckMode
	logger      *slog.Logger
	maxToken    any // MaxToken in decimal, the grant script's limit
	publish     any // "spublish" on a Cluster, else "publish"
	closed      atomic.Bool
	notifier    notifier
	batch       *batcher                 // sends Grant, Renew, Release and Token
	direct      int64                    // requests in flight sent before batching starts
	pipeToken   bool                     // Token as HMGET and TIME, not a script (see Token)
	retention   time.Duration            // 0: records are kept for ever (sweep.go)
	floors      *floors                  // a Cluster's floor per slot (floor.go); nil: one floor
	lastTimes   atomic.Pointer[timeArgs] // the last grant's or renewal's (grant.go)
	floor       any                      // the one floor's name when every record has the same (floor.go); else nil
	sweep       sweeper
}

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the prefix of every Redis key the backend uses (default
// DefaultPrefix). Backends with different prefixes have independent key
// spaces on one server.
func WithPrefix(prefix string) Option {
	return func(b *Backend) { b.prefix = prefix }
}

// WithLogger sets where the configuration check logs its warnings (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(b *Backend) { b.logger = l }
}

// New returns a backend over client, in the shape every backend shares
// (see backend's "Constructors and the safety check"). It checks the
// server's configuration first, bounded by ctx, as WithSafetyCheck says (by
// default it refuses an unsafe one). New talks to the server only for
// that check. The client stays the caller's: Close never closes it.
func New(ctx context.Context, client redis.UniversalClient, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("redisbackend: %w: nil client", backend.ErrInvalidConfig)
	}
	b := &Backend{
		client:    client,
		prefix:    DefaultPrefix,
		checkMode: backend.CheckRefuse,
		maxToken:  strconv.FormatInt(MaxToken, 10),
		publish:   "publish",
		direct:    directInFlight,
		retention: DefaultRetention,
	}
	_, cluster := client.(*redis.ClusterClient)
	if cluster {
		b.publish = "spublish" // stays on the key's shard
	}
	for _, o := range opts {
		o(b)
	}
	if cluster {
		b.floors = newFloors(b.prefix)
	}
	if b.floors == nil || b.floors.pinned {
		b.floor = b.prefix + floorSuffix
	}
	if err := checkPrefix(b.prefix); err != nil {
		return nil, err
	}
	if b.logger == nil {
		b.logger = slog.Default()
	}
	if b.minReplicas > 0 {
		if err := b.checkWaitOptions(); err != nil {
			return nil, err
		}
	}
	if err := b.checkConfig(ctx); err != nil {
		return nil, err
	}
	b.notifier.b = b
	b.batch = newBatcher(client, b.direct, !honoursDeadlines(client), ownReadBound(client))
	// One server per client: a Cluster or a Ring would send the keyless
	// TIME to any of their servers.
	_, b.pipeToken = client.(*redis.Client)
	b.sweep.init(b.retention)
	return b, nil
}

// honoursDeadlines reports whether client ends a command's socket reads
// and writes at its context's deadline, which go-redis does only with
// ContextTimeoutEnabled (otherwise only its ReadTimeout and WriteTimeout
// bound them). The backend sends the requests of a client that does not on
// goroutines of their own when their contexts can end before the client's
// ReadTimeout (see batcher.detachFor), so that a request still returns when
// its context ends (fencing.WithRequestTimeout) with a server that has
// stopped answering.
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// ownReadBound returns how long client itself lets a command wait for the
// reply of a server that stopped answering (its ReadTimeout), or 0 when
// that is unbounded or not known. Only a *redis.Client is known to read
// one reply per command: a Cluster's may follow redirections to other
// nodes, each read bounded anew.
func ownReadBound(client redis.UniversalClient) time.Duration {
	if c, ok := client.(*redis.Client); ok {
		return max(c.Options().ReadTimeout, 0)
	}
	return 0
}

// ready opens every operation: it returns ctx's error, then
// backend.ErrClosed after Close, then args: the error of the operation's
// argument check, a backend.Check function called on the operation's
// arguments (nil for an operation with none to check). The backends are
// the one layer that checks arguments (the Coordinator and the conformance
// suite rely on it), and this is where each operation does; a call refused
// here sends and changes nothing.
func (b *Backend) ready(ctx context.Context, args error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		// Past its deadline, its timer not yet run (a loaded host): a
		// request sent now would time out on the wire, its outcome
		// unknown, instead of never leaving.
		return context.DeadlineExceeded
	}
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return args
}

// Close implements backend.Backend: later calls return backend.ErrClosed,
// and every NotifyFree subscription ends (its channel is closed) with the
// connections and goroutines the backend started for them. Requests still
// queued for a shared round trip fail with backend.ErrClosed, unsent; the
// callers of a batch in flight get ErrOutcomeUnknown at once, and Close
// returns when that batch's replies came or its deadline passed (see
// docs/redis.md, "Concurrent requests share round trips"). A reclaiming
// pass in progress (WithRetention) stops, and Close waits for its last
// round trip. Close does not close the client, which belongs to the
// caller.
func (b *Backend) Close() error {
	b.closed.Store(true)
	b.sweep.stop()
	b.batch.close()
	b.notifier.close()
	return nil
}

// runKeys runs script s on the Redis keys rks, all in one hash slot, for
// op and returns its reply, waiting for minReplicas replicas when it is
// positive. Errors are classified by sendError.
func (b *Backend) runKeys(ctx context.Context, op string, s *script, rks []string, minReplicas int, args ...any) ([]any, error) {
	return b.runArgv(ctx, op, s, s.argvKeys(rks, args), minReplicas)
}

// runArgv is runKeys on a command built by s.argv.
func (b *Backend) runArgv(ctx context.Context, op string, s *script, a []any, minReplicas int) ([]any, error) {
	if minReplicas <= 0 {
		reply, err := s.runArgv(ctx, b.batch, a).Slice()
		if err != nil {
			return nil, sendError(ctx, op, err)
		}
		return reply, nil
	}
	return b.runReplicated(ctx, op, s, a)
}

// runReplicated is runArgv with WAIT for minReplicas (see runAndWait).
func (b *Backend) runReplicated(ctx context.Context, op string, s *script, a []any) ([]any, error) {
	if !b.batch.detach || ctx.Done() == nil {
		return b.runAndWait(ctx, op, s, a)
	}
	// The client would not end the exchange at ctx's end (see
	// honoursDeadlines): wait for it on a goroutine of its own.
	reply, err := await(b.batch, ctx, func() ([]any, error) { return b.runAndWait(ctx, op, s, a) })
	if abandoned(err) || errors.As(err, new(notSentError)) {
		return nil, sendError(ctx, op, err) // await's own: runAndWait's are classified
	}
	return reply, err
}

// ceil rounds d up to a multiple of unit. d is at most backend.MaxDuration,
// so it cannot overflow.
func ceil(d, unit time.Duration) time.Duration {
	if r := d % unit; r != 0 {
		d += unit - r
	}
	return d
}

// checkPrefix refuses a prefix that would split a key's Redis keys across
// Cluster slots. Each key's hash and channel carry the hash tag
// {base64url(key)}, so the scripts may touch both; but Redis hashes from the
// first '{' of the whole name, and when that brace is the prefix's and is
// followed at once by '}' (an empty tag) Redis hashes the whole name, which
// differs between the hash and the channel.
func checkPrefix(prefix string) error {
	if _, after, ok := strings.Cut(prefix, "{"); ok && strings.HasPrefix(after, "}") {
		return fmt.Errorf("%w: the prefix's first '{' is followed by '}' (an empty hash tag would put a key's hash and channel in different Cluster slots)", errInvalidConfig)
	}
	return nil
}
