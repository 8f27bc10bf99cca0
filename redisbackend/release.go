package redisbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Release implements backend.Backend. Ending a live lease publishes on the
// key's channel (see NotifyFree), in the same script.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx, backend.CheckRelease(key, leaseID)); err != nil {
		return err
	}
	b.drive()
	rk, channel := b.names(key, recordSuffix, channelSuffix)
	a := releaseScript.argv(1, 1+3)
	a = append(a, rk, leaseID, channel, b.publish)
	reply, err := b.runArgv(ctx, "release", releaseScript, a, 0)
	if err != nil {
		return err
	}
	return statusError(reply)
}

// ForceRelease implements backend.ForceReleaser: one script ends the live
// lease whoever holds it, marking it released exactly as its holder's
// Release would, and publishes on the key's channel (see NotifyFree). The
// old holder's Release then returns nil (its lease reads as released), its
// Renew gets backend.ErrLeaseNotFound, and the next grant gets the next
// token. An ambiguous error wraps backend.ErrOutcomeUnknown; resending is
// safe, and reports false if the first attempt ended the lease.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return false, err
	}
	n, err := forceReleaseScript.run(ctx, b.batch, b.RedisKey(key), b.channel(key), b.publish).Int64()
	if err != nil {
		return false, sendError(ctx, "force release", err)
	}
	return n == 1, nil
}
