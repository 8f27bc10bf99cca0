package redisbackend

import (
	"context"
	"fmt"

	"github.com/fencing-go/fencing/backend"
)

// Inspect implements backend.Inspector: one read-only script reads the
// record against the server's clock. MaxToken is the record's token field,
// so it also shows a counter that was set without a lease.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx); err != nil {
		return backend.KeyState{}, err
	}
	if err := backend.CheckKey(key); err != nil {
		return backend.KeyState{}, err
	}
	reply, err := inspectScript.run(ctx, b.batch, b.RedisKey(key)).Slice()
	if err != nil {
		return backend.KeyState{}, sendError(ctx, "inspect", err)
	}
	st, err := parseState(reply)
	if err != nil {
		return backend.KeyState{}, fmt.Errorf("redis inspect: %w", err)
	}
	return st, nil
}

// ForceRelease implements backend.ForceReleaser: one script ends the live
// lease whoever holds it, marking it released exactly as its holder's
// Release would, and publishes on the key's channel (see NotifyFree). The
// old holder's Release then returns nil (its lease reads as released), its
// Renew gets backend.ErrLeaseNotFound, and the next grant gets the next
// token. An ambiguous error wraps backend.ErrOutcomeUnknown; resending is
// safe, and reports false if the first attempt ended the lease.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx); err != nil {
		return false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return false, err
	}
	n, err := forceReleaseScript.run(ctx, b.batch, b.RedisKey(key), b.channel(key), b.publish).Int64()
	if err != nil {
		return false, sendError(ctx, "force release", err)
	}
	return n == 1, nil
}
