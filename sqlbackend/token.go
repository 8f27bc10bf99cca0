package sqlbackend

import (
	"context"
	"database/sql"
	"errors"

	"github.com/fencing-go/fencing/backend"
)

// Token implements backend.Backend. On PostgreSQL it is one SELECT that
// judges expiry with clock_timestamp(); on SQLite a BEGIN IMMEDIATE
// transaction, so the read is ordered with every write.
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
	var token uint64
	var live bool
	err := b.sqliteTx(ctx, "token", func(c *sql.Conn, now hostNow) error {
		r, found, err := b.readRow(ctx, c, key)
		if found && r.live(now) {
			token, live = uint64(r.token), true
		}
		return err
	})
	return token, live, err
}
