package semaphore_test

import (
	"context"
	"sync/atomic"
	"time"

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

// countingQueue is counting with the store's lines (backend.Queuer), for
// WithFIFO.
type countingQueue struct{ *counting }

func (c countingQueue) Enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, error) {
	return c.Backend.(backend.Queuer).Enqueue(ctx, key, waiterID, ttl)
}

func (c countingQueue) Dequeue(ctx context.Context, key, waiterID string) error {
	return c.Backend.(backend.Queuer).Dequeue(ctx, key, waiterID)
}

func (c countingQueue) NotifyTurn(ctx context.Context, key, waiterID string) (backend.Subscription, error) {
	return c.Backend.(backend.Queuer).NotifyTurn(ctx, key, waiterID)
}
