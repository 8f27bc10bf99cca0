package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Grant implements backend.Backend. A refused grant returns a
// *backend.HeldError with the time the key stays closed on the server's
// clock: the holder's time left plus its lock delay, or, during a lock
// delay, the delay's time left (and Delayed set). The lock delay
// (Request.LockDelay, rounded up to a microsecond) is stored in the record
// with the lease, in the same script.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	return b.grantOrRenew(ctx, "grant", grantScript, req)
}

func (b *Backend) grantOrRenew(ctx context.Context, op string, s *script, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	ttl := ceil(req.Timeout, time.Millisecond)
	total := ceil(ttl+req.Margin, time.Microsecond)
	delay := ceil(req.LockDelay, time.Microsecond)
	b.drive()
	rks := []string{b.RedisKey(req.Key)}
	if s == grantScript {
		rks = append(rks, b.floorKey(rks[0]))
	}
	reply, err := b.runKeys(ctx, op, s, rks, b.minReplicas,
		req.LeaseID, ttl.Milliseconds(), int64(req.Margin), total.Microseconds(), b.maxToken, req.Owner, delay.Microseconds())
	if err != nil {
		return backend.Lease{}, err
	}
	if err := statusError(reply); err != nil {
		return backend.Lease{}, err
	}
	lease, err := parseLease(reply, req.Key, req.LeaseID, ttl, req.Margin)
	if err != nil {
		// The script ran, but we cannot tell what it did.
		return backend.Lease{}, fmt.Errorf("%w: redisbackend: %s: %w", backend.ErrOutcomeUnknown, op, err)
	}
	return lease, nil
}
