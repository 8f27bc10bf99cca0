package redisbackend_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/redisbackend"
)

// PresetToken implements conformance.TokenPresetter: it writes the token
// field of the key's hash (see redisbackend.RedisKey), the counter the grant
// script increments, leaving no lease.
func (h *harness) PresetToken(ctx context.Context, b backend.Backend, key string, token uint64) error {
	rb, ok := b.(*redisbackend.Backend)
	if !ok {
		return fmt.Errorf("PresetToken: %T is not a *redisbackend.Backend", b)
	}
	return h.client.HSet(ctx, rb.RedisKey(key), "token", strconv.FormatUint(token, 10)).Err()
}
