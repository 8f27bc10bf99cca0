package sqlbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

var _ backend.MultiGranter = (*Backend)(nil)

// GrantMany implements backend.MultiGranter with one transaction that
// grants every key in key order, as Grant does (on PostgreSQL the grant
// function, which locks the key's row; on SQLite the statements of Grant,
// under BEGIN IMMEDIATE; on MySQL Grant's SELECT ... FOR UPDATE of each
// row), and commits only when none refused: two
// GrantMany over overlapping sets lock their common rows in one order, so
// neither waits on the other in a cycle. A lost answer to the COMMIT is an
// unknown outcome, as for any grant.
func (b *Backend) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckMany(reqs)); err != nil {
		return nil, err
	}
	defer b.driveSweep()
	return b.dialect.grantMany(ctx, reqs)
}
