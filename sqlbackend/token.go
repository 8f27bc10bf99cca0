package sqlbackend

import (
	"context"
	"database/sql"
	"errors"

	"github.com/fencing-go/fencing/backend"
)

// Token implements backend.Backend. On PostgreSQL it is one SELECT that
// judges expiry with clock_timestamp(); on SQLite a BEGIN IMMEDIATE
// transaction, so the read is ordered with every write; on MySQL one
// SELECT that reads the server's clock after the row, and a second one
// under a shared lock when the first shows a lease ended (mysqlReadRow).
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx); err != nil {
		return 0, false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return 0, false, err
	}
	if b.dialect == Postgres {
		var token int64
		err := b.pgQueryRow(ctx, b.sql.token, []any{[]byte(key)}, &token)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return 0, false, nil
		case err != nil:
			return 0, false, b.classify(ctx, "token", err)
		}
		return uint64(token), true, nil
	}
	if b.dialect == MySQL {
		r, found, now, err := b.mysqlReadRow(ctx, key)
		if err != nil {
			return 0, false, b.classify(ctx, "token", err)
		}
		if found && r.live(now) {
			return uint64(r.token), true, nil
		}
		return 0, false, nil
	}
	var token uint64
	var live bool
	err := b.rowTx(ctx, "token", func(c querier, now hostNow) error {
		r, found, now, err := b.lockRow(ctx, c, key)
		if found && r.live(now) {
			token, live = uint64(r.token), true
		}
		return err
	})
	return token, live, err
}
