package sqlbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Release implements backend.Backend: one statement on PostgreSQL (an
// UPDATE of the live lease, see pgrow.go, or when that refuses the release
// function; both notify listening waiters when they commit), one BEGIN
// IMMEDIATE transaction on SQLite.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx, backend.CheckRelease(key, leaseID)); err != nil {
		return err
	}
	defer b.driveSweep()
	wake, err := b.dialect.release(ctx, key, leaseID)
	if wake && err == nil {
		b.hub.wakeKey(key)
	}
	return err
}

// ForceRelease implements backend.ForceReleaser. The old holder's release
// then returns nil (its lease reads as released) and leaves the lock delay
// running, its renewals and resent grants get backend.ErrLeaseNotFound.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return false, err
	}
	ended, err := b.dialect.forceRelease(ctx, key)
	if ended && err == nil {
		b.hub.wakeKey(key)
	}
	return ended, err
}
