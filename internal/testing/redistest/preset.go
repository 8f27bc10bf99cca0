package redistest

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/redisbackend"
)

// PresetToken is conformance.TokenPresetter for a Redis harness: it writes
// the token field of the key's hash (see redisbackend.RedisKey), the counter
// the grant script increments, leaving no lease.
func PresetToken(ctx context.Context, client redis.Cmdable, b backend.Backend, key string, token uint64) error {
	rb, ok := b.(*redisbackend.Backend)
	if !ok {
		return fmt.Errorf("PresetToken: %T is not a *redisbackend.Backend", b)
	}
	return client.HSet(ctx, rb.RedisKey(key), "token", strconv.FormatUint(token, 10)).Err()
}
