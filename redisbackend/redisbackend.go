// Package redisbackend is a fencing backend on Redis: a standalone server, a
// Sentinel-managed primary (go-redis failover client) or a Redis Cluster.
//
// The Redis server's clock is the coordinator's clock. Every operation is one
// Lua script in one round trip (EVALSHA, falling back to EVAL when the
// server's script cache lacks it); the script reads the server's TIME and
// decides expiry against it, so no time the client sends ever matters.
//
// # Records
//
// Each key is one Redis hash named
//
//	<prefix>{<base64url(key)>}:token
//
// that holds the key's highest token, the most recent lease's ID, its expiry
// (server microseconds) and whether it was released. The hash has no TTL and
// is never deleted: the highest token must outlive every lease, or a later
// grant could reissue it. That costs about 200 bytes plus the key per key
// ever leased. The base64url encoding lets any byte string be a key, keeps
// braces and separators in the key from making two keys collide, and makes
// the hash tag non-empty, so on a Cluster everything about one key lives in
// one slot. A prefix that itself contains braces moves the hash tag into the
// prefix and pins all keys to one slot; avoid that unless you want it.
//
// # Tokens
//
// Tokens are dense per key (1, 2, 3...; a failed grant uses none up) and are
// Redis integers, signed 64-bit: the largest is MaxToken (math.MaxInt64).
// Grant past it fails with backend.ErrTokenSpaceExhausted; tokens never
// wrap. Tokens never pass through a Lua number (a double), so they stay
// exact over the whole range.
//
// # Durability
//
// Tokens only grow as far as Redis keeps its data. With appendonly yes and
// appendfsync always, an acknowledged grant survives kill -9 and power loss.
// With appendfsync everysec, a crash of the machine can lose about the last
// second or two of writes, and so can kill -9 while a slow disk makes Redis
// postpone its AOF writes. Without
// an append-only file (RDB snapshots only, or no persistence) a restart
// loses tokens and they go back. An allkeys-* eviction policy can evict a
// key's record at any time; volatile-* policies and noeviction never touch
// it, since it has no TTL. New checks this configuration (WithConfigCheck).
//
// Replication is asynchronous: a failover can lose grants the old primary
// acknowledged. WithMinReplicas makes the primary wait for replicas after
// each grant and renewal, which narrows that window but is not consensus.
// See docs/redis.md for each setup's guarantees.
//
// # Retries
//
// go-redis resends a command after a dropped connection or a timeout
// (Options.MaxRetries), so a script may run twice. The lease ID doubles as
// the request's nonce: a grant whose ID is the key's most recent lease
// returns that lease unchanged, a resent release of a released lease returns
// nil, and a resent renewal just renews again. Errors after a request was
// sent wrap backend.ErrOutcomeUnknown together with the cause, so the caller
// (fencing.Coordinator does this) can resend with the same lease ID.
package redisbackend

import (
	"context"
	"encoding/base64"
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

const maxTokenString = "9223372036854775807"

// DefaultPrefix is the prefix of every Redis key the backend uses, unless
// WithPrefix sets another.
const DefaultPrefix = "fencing:"

// Sentinel errors of this backend. Test them with errors.Is.
var (
	// ErrReplication: a grant or renewal took effect on the primary, but
	// fewer replicas than WithMinReplicas asked for acknowledged it in
	// time. The error also wraps backend.ErrOutcomeUnknown, since a
	// failover could still lose the write; resending with the same lease ID
	// waits again.
	ErrReplication = errors.New("redisbackend: too few replicas acknowledged the write")
	// ErrUnsafeConfig: the server's configuration can lose or evict tokens
	// (see WithConfigCheck).
	ErrUnsafeConfig = errors.New("redisbackend: unsafe redis configuration")
	// ErrInvalidOption: New got a nil client or options it cannot honour.
	ErrInvalidOption = errors.New("redisbackend: invalid option")
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
	closed      atomic.Bool
}

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the prefix of every Redis key the backend uses (default
// DefaultPrefix). Backends with different prefixes have independent key
// spaces on one server.
func WithPrefix(prefix string) Option {
	return func(b *Backend) { b.prefix = prefix }
}

// WithMinReplicas makes every grant and renewal wait until at least n
// replicas acknowledged it, for up to timeout: the script and a WAIT n
// timeout go in one pipeline on one connection to the key's primary, so it
// is still one round trip. When fewer replicas acknowledge, the call returns
// an error wrapping both ErrReplication and backend.ErrOutcomeUnknown; the
// write stays on the primary and a resend with the same lease ID returns
// the same lease and waits again.
//
// The timeout must be shorter than the client's ReadTimeout, or the
// pipeline's read would time out first. n <= 0 turns waiting off (the
// default). It works with a *redis.Client (standalone or Sentinel failover)
// and a *redis.ClusterClient; New rejects other clients.
func WithMinReplicas(n int, timeout time.Duration) Option {
	return func(b *Backend) { b.minReplicas, b.waitTimeout = n, timeout }
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
	b := &Backend{client: client, prefix: DefaultPrefix, checkMode: ConfigRefuse}
	for _, o := range opts {
		o(b)
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
	return b, nil
}

func (b *Backend) checkWaitOptions() error {
	if b.waitTimeout <= 0 {
		return fmt.Errorf("%w: WithMinReplicas(%d, %v): the timeout must be positive", ErrInvalidOption, b.minReplicas, b.waitTimeout)
	}
	var readTimeout time.Duration
	switch c := b.client.(type) {
	case *redis.Client:
		readTimeout = c.Options().ReadTimeout
	case *redis.ClusterClient:
		readTimeout = c.Options().ReadTimeout
	default:
		return fmt.Errorf("%w: WithMinReplicas needs a *redis.Client or *redis.ClusterClient, not %T", ErrInvalidOption, b.client)
	}
	if readTimeout > 0 && b.waitTimeout >= readTimeout {
		return fmt.Errorf("%w: WithMinReplicas timeout %v must be shorter than the client's ReadTimeout %v", ErrInvalidOption, b.waitTimeout, readTimeout)
	}
	return nil
}

// RedisKey returns the name of the Redis hash that holds key's record, for
// operators and tests. The hash's field "token" is the key's highest token.
func (b *Backend) RedisKey(key string) string {
	enc := base64.RawURLEncoding
	var sb strings.Builder
	sb.Grow(len(b.prefix) + enc.EncodedLen(len(key)) + len("{}:token"))
	sb.WriteString(b.prefix)
	sb.WriteByte('{')
	sb.WriteString(enc.EncodeToString([]byte(key)))
	sb.WriteString("}:token")
	return sb.String()
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

// Grant implements backend.Backend.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	return b.grantOrRenew(ctx, "grant", grantScript, req)
}

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	return b.grantOrRenew(ctx, "renew", renewScript, req)
}

func (b *Backend) grantOrRenew(ctx context.Context, op string, script *redis.Script, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	ttl := ceil(req.Timeout, time.Millisecond)
	total := ceil(ttl+req.Margin, time.Microsecond)
	reply, err := b.run(ctx, script, req.Key, b.minReplicas,
		req.LeaseID,
		strconv.FormatInt(ttl.Milliseconds(), 10),
		strconv.FormatInt(int64(req.Margin), 10),
		strconv.FormatInt(total.Microseconds(), 10))
	if err != nil {
		return backend.Lease{}, fmt.Errorf("redis %s on key %q: %w", op, req.Key, err)
	}
	if err := statusError(reply, req.Key); err != nil {
		return backend.Lease{}, err
	}
	lease, err := parseLease(reply, req.Key, req.LeaseID)
	if err != nil {
		// The script ran, but we cannot tell what it did.
		return backend.Lease{}, fmt.Errorf("%w: redis %s on key %q: %w", backend.ErrOutcomeUnknown, op, req.Key, err)
	}
	return lease, nil
}

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	reply, err := b.run(ctx, releaseScript, key, 0, leaseID)
	if err != nil {
		return fmt.Errorf("redis release on key %q: %w", key, err)
	}
	return statusError(reply, key)
}

// Token implements backend.Backend. It is one read-only script, so it is
// as exact as the other operations: the server's clock decides liveness.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx); err != nil {
		return 0, false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return 0, false, err
	}
	s, err := tokenScript.Run(ctx, b.client, []string{b.RedisKey(key)}).Text()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("redis token on key %q: %w", key, err)
	}
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("redis token on key %q: bad token %q in redis: %w", key, s, err)
	}
	return tok, true, nil
}

// Close implements backend.Backend: later calls return backend.ErrClosed.
// It does not close the client, which belongs to the caller, and starts no
// goroutines to stop.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}

// run runs script on key's record and returns its reply, waiting for
// minReplicas replicas when it is positive. Errors after the request may
// have reached the server wrap backend.ErrOutcomeUnknown.
func (b *Backend) run(ctx context.Context, script *redis.Script, key string, minReplicas int, args ...any) ([]string, error) {
	keys := []string{b.RedisKey(key)}
	if minReplicas <= 0 {
		reply, err := script.Run(ctx, b.client, keys, args...).StringSlice()
		if err != nil {
			return nil, sentError(ctx, err)
		}
		return reply, nil
	}
	return b.runAndWait(ctx, script, keys, args)
}

// runAndWait sends the script and WAIT in one pipeline on one connection to
// the primary that owns the key, so WAIT covers the script's writes.
func (b *Backend) runAndWait(ctx context.Context, script *redis.Script, keys []string, args []any) ([]string, error) {
	for attempt := 0; ; attempt++ {
		var node *redis.Client
		switch c := b.client.(type) {
		case *redis.Client:
			node = c
		case *redis.ClusterClient:
			var err error
			if node, err = c.MasterForKey(ctx, keys[0]); err != nil {
				return nil, fmt.Errorf("find the primary of %q: %w", keys[0], err)
			}
		default: // New rejects other clients
			return nil, fmt.Errorf("WithMinReplicas needs a *redis.Client or *redis.ClusterClient, not %T", b.client)
		}
		pipe := node.Pipeline()
		var eval *redis.Cmd
		if attempt == 0 {
			eval = script.EvalSha(ctx, pipe, keys, args...)
		} else {
			eval = script.Eval(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "wait", b.minReplicas, ceil(b.waitTimeout, time.Millisecond).Milliseconds())
		_, _ = pipe.Exec(ctx) // errors are on the commands
		reply, err := eval.StringSlice()
		if attempt == 0 && (redis.HasErrorPrefix(err, "NOSCRIPT") || errors.Is(err, redis.ErrNoScript)) {
			continue // the server lacks the script: nothing ran; send its source
		}
		if cc, ok := b.client.(*redis.ClusterClient); ok && attempt < 2 &&
			(redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
			cc.ReloadState(ctx) // the slot moved: nothing ran; ask the new owner
			continue
		}
		if err != nil {
			return nil, sentError(ctx, err)
		}
		if len(reply) == 0 || reply[0] != "ok" {
			return reply, nil // nothing written that needs waiting for
		}
		acked, err := wait.Int64()
		if err != nil {
			return nil, fmt.Errorf("%w: %w: WAIT: %w", backend.ErrOutcomeUnknown, ErrReplication, err)
		}
		if acked < int64(b.minReplicas) {
			return nil, fmt.Errorf("%w: %w: %d of %d replicas acknowledged within %v",
				backend.ErrOutcomeUnknown, ErrReplication, acked, b.minReplicas, b.waitTimeout)
		}
		return reply, nil
	}
}

// sentError classifies an error from a request that was handed to go-redis.
// go-redis may have written it, and may have resent it after a dropped
// connection or a timeout, so the request may have run even when the last
// error is a reply like LOADING or READONLY. Only errors that the script
// would have met on every attempt (a wrong type, a permission, a bug) say
// for sure that nothing happened; everything else wraps
// backend.ErrOutcomeUnknown with the cause.
//
// When ctx ended meanwhile, the error also wraps ctx.Err(): go-redis often
// reports a context deadline as a plain network timeout.
func sentError(ctx context.Context, err error) error {
	for _, prefix := range definiteErrors {
		if redis.HasErrorPrefix(err, prefix) {
			return err
		}
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(dl) {
		// The socket deadline (set from ctx) can fire a moment before the
		// context's own timer marks it done.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w: %w", backend.ErrOutcomeUnknown, cerr, err)
	}
	return fmt.Errorf("%w: %w", backend.ErrOutcomeUnknown, err)
}

// definiteErrors are prefixes of Redis error replies that a script gets
// deterministically, so no earlier attempt of the same request ran either.
var definiteErrors = []string{
	"WRONGTYPE", "NOPERM", "NOAUTH", "WRONGPASS",
	"ERR unknown command", "ERR user_script", "ERR Error running script",
	"ERR wrong number of arguments",
}

// statusError turns a script's status into the contract's error (nil for
// "ok").
func statusError(reply []string, key string) error {
	if len(reply) == 0 {
		return fmt.Errorf("%w: redis: empty script reply for key %q", backend.ErrOutcomeUnknown, key)
	}
	switch reply[0] {
	case "ok":
		return nil
	case "held":
		return fmt.Errorf("%w: key %q", backend.ErrLeaseHeld, key)
	case "expired":
		return fmt.Errorf("%w: key %q", backend.ErrLeaseExpired, key)
	case "notfound":
		return fmt.Errorf("%w: key %q", backend.ErrLeaseNotFound, key)
	case "released":
		return fmt.Errorf("%w: key %q: the lease was granted and then released", backend.ErrLeaseNotFound, key)
	case "exhausted":
		return fmt.Errorf("%w: key %q reached token %s", backend.ErrTokenSpaceExhausted, key, strings.Join(reply[1:], " "))
	default:
		return fmt.Errorf("%w: redis: unexpected script status %q for key %q", backend.ErrOutcomeUnknown, reply[0], key)
	}
}

// parseLease reads {"ok", token, exp µs, ttl ms, margin ns}.
func parseLease(reply []string, key, leaseID string) (backend.Lease, error) {
	if len(reply) != 5 {
		return backend.Lease{}, fmt.Errorf("redis: script replied %d values, want 5", len(reply))
	}
	tok, err1 := strconv.ParseUint(reply[1], 10, 64)
	exp, err2 := strconv.ParseInt(reply[2], 10, 64)
	ttl, err3 := strconv.ParseInt(reply[3], 10, 64)
	margin, err4 := strconv.ParseInt(reply[4], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return backend.Lease{}, fmt.Errorf("redis: bad script reply %q: %w", reply, err)
	}
	return backend.Lease{
		Key:       key,
		LeaseID:   leaseID,
		Token:     tok,
		TTL:       time.Duration(ttl) * time.Millisecond,
		Margin:    time.Duration(margin),
		ExpiresAt: time.UnixMicro(exp),
	}, nil
}

// ceil rounds d up to a multiple of unit. d is at most backend.MaxDuration,
// so it cannot overflow.
func ceil(d, unit time.Duration) time.Duration {
	if r := d % unit; r != 0 {
		d += unit - r
	}
	return d
}
