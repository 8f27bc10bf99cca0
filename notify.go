package fencing

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Subscription is a watch for the end of a key's lease; see NotifyFree.
type Subscription = backend.Subscription

// NotifyFree watches key for the end of its lease (a release, a forced
// release and, where the backend sees it, an expiry), for recipes that wait
// on keys in their own way, as packages election and semaphore do; Lock
// uses it too. It returns once the watch is in place; wake-ups may be
// spurious and are coalesced (see backend.Notifier). Close the
// Subscription when done. It needs a backend that implements
// backend.Notifier, or returns an error wrapping errors.ErrUnsupported:
// then poll.
func (c *Coordinator) NotifyFree(ctx context.Context, key string) (Subscription, error) {
	n, ok := c.backend.(backend.Notifier)
	if !ok {
		return nil, opError("notify", key, unsupported("backend.Notifier"))
	}
	sub, err := n.NotifyFree(ctx, key)
	if err != nil {
		return nil, opError("notify", key, err)
	}
	return sub, nil
}
