package redisbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	return b.grantOrRenew(ctx, "renew", renewScript, req)
}
