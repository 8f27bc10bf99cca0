package sqlbackend

import (
	"context"
	"database/sql"
	"errors"

	"github.com/fencing-go/fencing/backend"
)

// Token implements backend.Backend. On PostgreSQL it is one SELECT that
// judges expiry with clock_timestamp(), and a second read behind the key's
// lock when the first finds no live lease (pgTokenLocked); on SQLite a BEGIN IMMEDIATE
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
			return b.pgTokenLocked(ctx, key)
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

// pgTokenLocked reads key's live token again behind the key's advisory lock
// (the admit function: shared with other readers, exclusive to grants,
// renewals and releases) in a fresh snapshot. The first SELECT's snapshot
// is taken before its clock_timestamp() is read: a renewal that committed
// between the two, before the old expiry, leaves that SELECT judging the
// old row at a later time, a lease ended that never was. Behind the lock no
// write to the key commits between the snapshot and the clock.
func (b *Backend) pgTokenLocked(ctx context.Context, key string) (uint64, bool, error) {
	var token sql.NullInt64
	if err := b.pgQueryRow(ctx, b.sql.admit, []any{[]byte(key)}, &token); err != nil {
		return 0, false, b.classify(ctx, "token", err)
	}
	if !token.Valid {
		return 0, false, nil
	}
	return uint64(token.Int64), true, nil
}
