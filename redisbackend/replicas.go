package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
)

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

func (b *Backend) checkWaitOptions() error {
	if b.waitTimeout <= 0 {
		return fmt.Errorf("%w: WithMinReplicas(%d, %v): the timeout must be positive", errInvalidConfig, b.minReplicas, b.waitTimeout)
	}
	var readTimeout time.Duration
	switch c := b.client.(type) {
	case *redis.Client:
		readTimeout = c.Options().ReadTimeout
	case *redis.ClusterClient:
		readTimeout = c.Options().ReadTimeout
	default:
		return fmt.Errorf("%w: WithMinReplicas needs a *redis.Client or *redis.ClusterClient, not %T", errInvalidConfig, b.client)
	}
	if readTimeout > 0 && b.waitTimeout >= readTimeout {
		return fmt.Errorf("%w: WithMinReplicas timeout %v must be shorter than the client's ReadTimeout %v", errInvalidConfig, b.waitTimeout, readTimeout)
	}
	return nil
}

// runAndWait sends the script and WAIT in one pipeline on one connection to
// the primary that owns the key, so WAIT covers the script's writes. a is
// the script's command, built by s.argv.
func (b *Backend) runAndWait(ctx context.Context, op string, s *script, a []any) ([]any, error) {
	for attempt := 0; ; attempt++ {
		var node *redis.Client
		switch c := b.client.(type) {
		case *redis.Client:
			node = c
		case *redis.ClusterClient:
			var err error
			if node, err = c.MasterForKey(ctx, a[3].(string)); err != nil {
				return nil, fmt.Errorf("redisbackend: %s: find the key's primary: %w", op, err)
			}
		default: // New rejects other clients
			return nil, fmt.Errorf("redisbackend: %s: WithMinReplicas needs a *redis.Client or *redis.ClusterClient, not %T", op, b.client)
		}
		pipe := node.Pipeline()
		eval := onceCmd{redis.NewCmd(ctx, a...)}
		if attempt > 0 {
			eval = onceCmd{redis.NewCmd(ctx, s.withSource(a)...)}
		}
		_ = pipe.Process(ctx, eval)
		wait := pipe.Do(ctx, "wait", b.minReplicas, ceil(b.waitTimeout, time.Millisecond).Milliseconds())
		_, _ = pipe.Exec(ctx) // errors are on the commands
		reply, err := eval.Slice()
		if attempt == 0 && isNoScript(err) {
			continue // the server lacks the script: nothing ran; send its source
		}
		if cc, ok := b.client.(*redis.ClusterClient); ok && attempt < 2 &&
			(redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
			cc.ReloadState(ctx) // the slot moved: nothing ran; ask the new owner
			continue
		}
		if err != nil {
			return nil, sendError(ctx, op, err)
		}
		if len(reply) == 0 || reply[0] != "ok" {
			return reply, nil // nothing written that needs waiting for
		}
		acked, err := wait.Int64()
		if err != nil {
			return nil, fmt.Errorf("%w: %w: redisbackend: %s: WAIT: %w", backend.ErrOutcomeUnknown, ErrReplication, op, err)
		}
		if acked < int64(b.minReplicas) {
			return nil, fmt.Errorf("%w: %w: redisbackend: %s: %d of %d replicas acknowledged within %v",
				backend.ErrOutcomeUnknown, ErrReplication, op, acked, b.minReplicas, b.waitTimeout)
		}
		return reply, nil
	}
}
