package semaphore_test

import (
	"context"
	"sync/atomic"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
)

type world = recipetest.World

var worlds = recipetest.Each

// counting wraps a backend and counts its grants, passing on the optional
// capabilities the semaphore uses.
type counting struct {
	backend.Backend
	grants atomic.Int64
}

func (c *counting) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	c.grants.Add(1)
	return c.Backend.Grant(ctx, req)
}

func (c *counting) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	return c.Backend.(backend.Notifier).NotifyFree(ctx, key)
}

func (c *counting) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	return c.Backend.(backend.Inspector).Inspect(ctx, key)
}

func (c *counting) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	return c.Backend.(backend.Lister).List(ctx, prefix, cursor, limit)
}
