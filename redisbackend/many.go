package redisbackend

import (
	"context"
	_ "embed" // the script
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
)

//go:embed lua/grantmany.lua
var grantManyLua string

var grantManyScript = newScript(grantManyLua)

var _ backend.MultiGranter = (*Backend)(nil)

// ErrCrossSlot is wrapped by GrantMany's error on a Redis Cluster when the
// keys' records are in different hash slots, where no one script can reach
// them all. It wraps backend.ErrInvalidKey. Each key's records carry a
// hash tag of their own, so keys share a slot only when the backend's
// prefix has a hash tag of its own, which Redis reads first: a Backend
// made WithPrefix("{orders}:") keeps all its keys in one slot (on one
// master), so any of them can be granted together.
var ErrCrossSlot = fmt.Errorf("%w: keys in different Redis Cluster hash slots (give the backend a prefix with a hash tag, such as \"{orders}:\", to keep its keys in one slot)", backend.ErrInvalidKey)

// GrantMany implements backend.MultiGranter with one script on every key's
// record, in key order: it checks each as Grant's script does and writes
// only once none refused, so the grant is atomic (a script runs alone on
// the server). On a Redis Cluster every record must be in one hash slot
// (see ErrCrossSlot).
func (b *Backend) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckMany(reqs)); err != nil {
		return nil, err
	}
	order := backend.KeyOrder(reqs)
	rks := make([]string, 0, len(reqs))
	args := make([]any, 0, 1+6*len(reqs))
	args = append(args, b.maxToken)
	for _, i := range order {
		r := reqs[i]
		ttl := ceil(r.Timeout, time.Millisecond)
		rks = append(rks, b.RedisKey(r.Key))
		args = append(args, r.LeaseID, ttl.Milliseconds(), int64(r.Margin),
			ceil(ttl+r.Margin, time.Microsecond).Microseconds(), r.Owner, ceil(r.LockDelay, time.Microsecond).Microseconds())
	}
	b.drive()
	rks = append(rks, b.floorKey(rks[0]))
	reply, err := b.runKeys(ctx, "grant", grantManyScript, rks, b.minReplicas, args...)
	if err != nil {
		if rerr := redis.Error(nil); errors.As(err, &rerr) && redis.HasErrorPrefix(rerr, "CROSSSLOT") {
			return nil, fmt.Errorf("%w: %w", ErrCrossSlot, rerr) // refused before it ran
		}
		return nil, err
	}
	if len(reply) > 1 && reply[0] != "ok" { // {status, i, µs left}
		i, _ := replyInt(reply[1])
		if i < 1 || int(i) > len(reqs) {
			return nil, fmt.Errorf("%w: %w: key index %v", backend.ErrOutcomeUnknown, errBadReply, reply[1])
		}
		return nil, &backend.ManyError{Index: order[i-1], Err: statusError(append([]any{reply[0]}, reply[2:]...))}
	}
	if err := statusError(reply); err != nil {
		return nil, err
	}
	if len(reply) != 1+4*len(reqs) {
		return nil, fmt.Errorf("%w: redisbackend: grant: %w: %d values for %d keys", backend.ErrOutcomeUnknown, errBadReply, len(reply), len(reqs))
	}
	leases := make([]backend.Lease, len(reqs))
	for j, i := range order {
		one := append([]any{"ok"}, reply[1+4*j:5+4*j]...)
		if leases[i], err = parseLease(one, reqs[i].Key, reqs[i].LeaseID, 0, 0); err != nil {
			return nil, fmt.Errorf("%w: redisbackend: grant: %w", backend.ErrOutcomeUnknown, err)
		}
	}
	return leases, nil
}
