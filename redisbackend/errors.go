package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/ctxend"
)

// The sentinel error of this backend; test it with errors.Is. New's errors
// wrap package backend's shared ones (see backend's "Constructors and the
// safety check"), List's bad cursor backend.ErrInvalidCursor.
var (
	// ErrReplication: a grant or renewal took effect on the primary, but
	// fewer replicas than WithMinReplicas asked for acknowledged it in
	// time. The error also wraps backend.ErrOutcomeUnknown, since a
	// failover could still lose the write; resending with the same lease ID
	// waits again.
	ErrReplication = errors.New("redisbackend: too few replicas acknowledged the write")
)

// errInvalidConfig is wrapped by New's errors about its arguments.
var errInvalidConfig = fmt.Errorf("redisbackend: %w", backend.ErrInvalidConfig)

// sendError classifies the error of a script that was handed to go-redis
// for op ("grant", ...). Scripts go out once (onceCmd), so the error is
// about that one attempt:
//
//   - it never left (notSent: a refused or timed-out dial, a closed client,
//     no free connection in the pool): nothing happened, and the error
//     says so by not wrapping backend.ErrOutcomeUnknown;
//   - the server replied with an error (redis.Error: WRONGTYPE, NOPERM,
//     READONLY, LOADING, OOM, BUSY, a script error...): the script did not
//     run, or failed before its first write, so nothing happened either;
//   - anything else (a lost connection, a read timeout, a reset) may have
//     come after the server ran the script: the error wraps
//     backend.ErrOutcomeUnknown with the cause.
//
// When ctx ended meanwhile, an ambiguous error also wraps ctx.Err():
// go-redis often reports a context deadline as a plain network timeout.
func sendError(ctx context.Context, op string, err error) error {
	if notSent(err) {
		return fmt.Errorf("redisbackend: %s: not sent: %w", op, err)
	}
	if rerr := redis.Error(nil); errors.As(err, &rerr) {
		return fmt.Errorf("redisbackend: %s: %w", op, err)
	}
	if cerr := ctxend.Err(ctx); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: redisbackend: %s: %w: %w", backend.ErrOutcomeUnknown, op, cerr, err)
	}
	return fmt.Errorf("%w: redisbackend: %s: %w", backend.ErrOutcomeUnknown, op, err)
}

// notSent reports whether err shows that go-redis never wrote the request:
// it failed to get a connection. Only errors that go-redis returns before
// writing count: a dial error (*net.OpError with Op "dial", which is also
// what go-redis's pool returns while it backs off after failed dials), a
// closed client or pool, and a pool that had no connection to give.
// Errors of a connection's hand-shake (HELLO, AUTH) come after a dial
// succeeded and are not told apart from a lost reply, so they stay
// ambiguous.
func notSent(err error) bool {
	if abandoned(err) {
		return false // its caller stopped waiting after it was sent (batch.go)
	}
	if errors.As(err, new(notSentError)) || errors.Is(err, backend.ErrClosed) {
		return true // it never left the backend's queue (batch.go)
	}
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
