package sqlbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Renew implements backend.Backend: one statement on PostgreSQL (the renew
// function), one BEGIN IMMEDIATE transaction on SQLite.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	defer b.driveSweep()
	return b.dialect.renew(ctx, req)
}
