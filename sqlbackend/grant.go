package sqlbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Grant implements backend.Backend. On PostgreSQL it is one statement (an
// upsert that takes a free key, see pgrow.go; when it refuses, the grant
// function: the row locked, the server's clock read, the lock delay and
// the live lease judged, the counter raised); on SQLite one BEGIN
// IMMEDIATE transaction; on MySQL one transaction that locks the row.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	defer b.driveSweep()
	return b.dialect.grant(ctx, req)
}
