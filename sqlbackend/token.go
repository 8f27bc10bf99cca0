package sqlbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Token implements backend.Backend. On PostgreSQL it is one SELECT that
// judges expiry with clock_timestamp(), and a second read behind the key's
// lock when the first finds no live lease (tokenLocked); on SQLite a BEGIN IMMEDIATE
// transaction, so the read is ordered with every write; on MySQL one
// SELECT that reads the server's clock after the row, and a second one
// under a shared lock when the first shows a lease ended (readLive).
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, false, err
	}
	return b.dialect.token(ctx, key)
}
