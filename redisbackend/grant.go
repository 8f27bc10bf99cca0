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
	d := b.timeArgs(req)
	b.drive()
	rk := b.RedisKey(req.Key)
	var a []any
	if s == grantScript {
		a = s.argv(2, 2+7)
		a = append(a, rk, b.floorArg(rk))
	} else {
		a = s.argv(1, 1+7)
		a = append(a, rk)
	}
	a = append(a, req.LeaseID, d.ttlMs, d.marginNs, d.totalUs, b.maxToken, req.Owner, d.delayUs)
	reply, err := b.runArgv(ctx, op, s, a, b.minReplicas)
	if err != nil {
		return backend.Lease{}, err
	}
	if err := statusError(reply); err != nil {
		return backend.Lease{}, err
	}
	lease, err := parseLease(reply, req.Key, req.LeaseID, d.ttl, req.Margin)
	if err != nil {
		// The script ran, but we cannot tell what it did.
		return backend.Lease{}, fmt.Errorf("%w: redisbackend: %s: %w", backend.ErrOutcomeUnknown, op, err)
	}
	return lease, nil
}

// timeArgs are the time arguments of a grant or renewal script, boxed as
// command arguments. Backend.timeArgs keeps the last ones made, since a
// caller's requests mostly repeat their times: reusing them spares an
// allocation per argument.
type timeArgs struct {
	timeout, margin, lockDelay time.Duration // the request's, as given

	ttl                               time.Duration // the timeout rounded up to a millisecond
	ttlMs, marginNs, totalUs, delayUs any           // ttl in ms, the margin in ns, ttl+margin and the lock delay in µs, rounded up
}

// timeArgs returns req's time arguments (see timeArgs).
func (b *Backend) timeArgs(req backend.Request) *timeArgs {
	if d := b.lastTimes.Load(); d != nil && d.timeout == req.Timeout && d.margin == req.Margin && d.lockDelay == req.LockDelay {
		return d
	}
	ttl := ceil(req.Timeout, time.Millisecond)
	d := &timeArgs{
		timeout: req.Timeout, margin: req.Margin, lockDelay: req.LockDelay,
		ttl:      ttl,
		ttlMs:    ttl.Milliseconds(),
		marginNs: int64(req.Margin),
		totalUs:  ceil(ttl+req.Margin, time.Microsecond).Microseconds(),
		delayUs:  ceil(req.LockDelay, time.Microsecond).Microseconds(),
	}
	b.lastTimes.Store(d)
	return d
}
