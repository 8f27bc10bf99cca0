package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
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
)

// Backend is a fencing backend on Redis. It is safe for concurrent use.
// The zero value is not usable; call New.
type Backend struct {
	client      redis.UniversalClient
	prefix      string
	minReplicas int
	waitTimeout time.Duration
	checkMode   ConfigMode
	logger      *slog.Logger
	maxToken    any // MaxToken in decimal, the grant script's limit
	publish     any // "spublish" on a Cluster, else "publish"
	closed      atomic.Bool
	notifier    notifier
	batch       *batcher // sends Grant, Renew, Release and Token
	direct      int64    // requests in flight sent before batching starts
	pipeToken   bool     // Token as HMGET and TIME, not a script (see Token)
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

// New returns a backend over client, checking the server's configuration
// first as WithConfigCheck says (by default it refuses an unsafe one). The
// client stays the caller's: Close never closes it.
//
// New talks to the server only for the configuration check; NewContext
// bounds that with a context.
func New(client redis.UniversalClient, opts ...Option) (*Backend, error) {
	return NewContext(context.Background(), client, opts...)
}

// NewContext is New with a context for the configuration check.
func NewContext(ctx context.Context, client redis.UniversalClient, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	b := &Backend{
		client:    client,
		prefix:    DefaultPrefix,
		checkMode: ConfigRefuse,
		maxToken:  strconv.FormatInt(MaxToken, 10),
		publish:   "publish",
		direct:    directInFlight,
	}
	if _, ok := client.(*redis.ClusterClient); ok {
		b.publish = "spublish" // stays on the key's shard
	}
	for _, o := range opts {
		o(b)
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
	b.batch = newBatcher(client, b.direct, !honoursDeadlines(client))
	// One server per client: a Cluster or a Ring would send the keyless
	// TIME to any of their servers.
	_, b.pipeToken = client.(*redis.Client)
	return b, nil
}

// honoursDeadlines reports whether client ends a command's socket reads
// and writes at its context's deadline, which go-redis does only with
// ContextTimeoutEnabled (otherwise only its ReadTimeout and WriteTimeout
// bound them). The backend sends the requests of a client that does not on
// goroutines of their own, so that a request still returns when its
// context ends (fencing.WithRequestTimeout) with a server that has stopped
// answering.
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

func (b *Backend) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// Grant implements backend.Backend. A refused grant returns a
// *backend.HeldError with the holder's time left on the server's clock.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	return b.grantOrRenew(ctx, "grant", grantScript, req)
}

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	return b.grantOrRenew(ctx, "renew", renewScript, req)
}

func (b *Backend) grantOrRenew(ctx context.Context, op string, s *script, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	ttl := ceil(req.Timeout, time.Millisecond)
	total := ceil(ttl+req.Margin, time.Microsecond)
	reply, err := b.run(ctx, op, s, req.Key, b.minReplicas,
		req.LeaseID, ttl.Milliseconds(), int64(req.Margin), total.Microseconds(), b.maxToken, req.Owner)
	if err != nil {
		return backend.Lease{}, err
	}
	if err := statusError(reply); err != nil {
		return backend.Lease{}, err
	}
	lease, err := parseLease(reply, req.Key, req.LeaseID, ttl, req.Margin)
	if err != nil {
		// The script ran, but we cannot tell what it did.
		return backend.Lease{}, fmt.Errorf("%w: redis %s: %w", backend.ErrOutcomeUnknown, op, err)
	}
	return lease, nil
}

// Release implements backend.Backend. Ending a live lease publishes on the
// key's channel (see NotifyFree), in the same script.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	reply, err := b.run(ctx, "release", releaseScript, key, 0, leaseID, b.channel(key), b.publish)
	if err != nil {
		return err
	}
	return statusError(reply)
}

// Token implements backend.Backend. The server's clock decides liveness,
// as in every other operation. On a *redis.Client, which talks to one
// server, it is cheaper than a script (docs/benchmarks.md, Redis): HMGET of the
// record and then TIME, pipelined on one connection, so the clock is read
// after the record. A lease the record shows live at a TIME before its end
// was live when the record was read, and a released or never-granted one
// was not live then either. Only a lease that looks ended by its time (it
// expired, or TIME came late and a renewal moved its end meanwhile), or
// whose end this code cannot read, is asked again, by the read-only
// script, which reads both at one instant. On other clients (a Cluster, a
// Ring), which could send TIME to another server, it is the script alone.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx); err != nil {
		return 0, false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return 0, false, err
	}
	rk := b.RedisKey(key)
	if b.pipeToken {
		tok, live, sure, err := b.pipelinedToken(ctx, rk)
		if sure || err != nil {
			return tok, live, err
		}
	}
	s, err := tokenScript.run(ctx, b.batch, rk).Text()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, sendError(ctx, "token", err)
	}
	return parseToken(s)
}

// pipelinedToken reads the record and then the server's clock (see
// Token). sure is false when the script must decide.
func (b *Backend) pipelinedToken(ctx context.Context, rk string) (tok uint64, live, sure bool, err error) {
	fields := redis.NewCmd(ctx, "hmget", rk, "token", "exp")
	clock := redis.NewCmd(ctx, "time")
	if err := b.batch.do(ctx, fields, clock); abandoned(err) {
		return 0, false, true, sendError(ctx, "token", err)
	}
	h, err := fields.Slice()
	if err == nil {
		var t []any
		if t, err = clock.Slice(); err == nil {
			return readToken(h, t)
		}
	}
	return 0, false, true, sendError(ctx, "token", err)
}

// readToken reads the replies of HMGET token exp and TIME.
func readToken(h, t []any) (tok uint64, live, sure bool, err error) {
	if len(h) != 2 || len(t) != 2 {
		return 0, false, true, fmt.Errorf("redis token: %w: %d fields, %d clock values", errBadReply, len(h), len(t))
	}
	exp, _ := h[1].(string)
	if exp == "" || exp == "r" {
		return 0, false, true, nil // never leased, or released
	}
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return 0, false, false, nil // not written as digits: the script reads any number
	}
	sec, _ := t[0].(string)
	usec, _ := t[1].(string)
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(usec, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, false, true, fmt.Errorf("redis token: %w: TIME: %w", errBadReply, err)
	}
	if s*1_000_000+us >= e {
		return 0, false, false, nil // looks ended: ask the script
	}
	ts, _ := h[0].(string)
	tok, live, err = parseToken(ts)
	return tok, live, true, err
}

// parseToken reads a live lease's token.
func parseToken(s string) (uint64, bool, error) {
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("redis token: %w %q: %w", errBadReply, s, err)
	}
	return tok, true, nil
}

// Close implements backend.Backend: later calls return backend.ErrClosed,
// and every NotifyFree subscription ends (its channel is closed) with the
// connections and goroutines the backend started for them. Requests still
// queued for a shared round trip fail with backend.ErrClosed, unsent; the
// callers of a batch in flight get ErrOutcomeUnknown at once, and Close
// returns when that batch's replies came or its deadline passed (see
// docs/redis.md, "Concurrent requests share round trips"). Close does not
// close the client, which belongs to the caller.
func (b *Backend) Close() error {
	b.closed.Store(true)
	b.batch.close()
	b.notifier.close()
	return nil
}

// run runs script s on key's record for op and returns its reply, waiting
// for minReplicas replicas when it is positive. Errors are classified by
// sendError.
func (b *Backend) run(ctx context.Context, op string, s *script, key string, minReplicas int, args ...any) ([]any, error) {
	rk := b.RedisKey(key)
	if minReplicas <= 0 {
		reply, err := s.run(ctx, b.batch, rk, args...).Slice()
		if err != nil {
			return nil, sendError(ctx, op, err)
		}
		return reply, nil
	}
	if !b.batch.detach || ctx.Done() == nil {
		return b.runAndWait(ctx, op, s, rk, args)
	}
	// The client would not end the exchange at ctx's end (see
	// honoursDeadlines): wait for it on a goroutine of its own.
	reply, err := await(b.batch, ctx, func() ([]any, error) { return b.runAndWait(ctx, op, s, rk, args) })
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
