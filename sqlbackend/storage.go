package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// pgStorage gives the lease and waiters tables the storage settings that
// keep them small under constant updates (see docs/sql.md, "A lease table
// that stays fast"): every grant, renewal and release rewrites one hot
// row, and a fillfactor of 50 leaves room on each page for the new
// version, so the update is HOT (no index entry) and the page is pruned
// in place; autovacuum runs on a fixed count of dead rows (not a fraction
// of a table that stays small) and without sleeping between pages. It
// changes the tables only when their settings differ, so that a
// CreateTables on up-to-date tables takes no lock.
const pgStorage = `DO $do$
BEGIN
	IF NOT coalesce((SELECT reloptions @> ARRAY['fillfactor=50', 'autovacuum_vacuum_scale_factor=0', 'autovacuum_vacuum_threshold=200', 'autovacuum_vacuum_cost_delay=0']
			FROM pg_class WHERE oid = '{t}'::regclass), false) THEN
		ALTER TABLE {t} SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200, autovacuum_vacuum_cost_delay = 0);
	END IF;
	IF NOT coalesce((SELECT reloptions @> ARRAY['fillfactor=70', 'autovacuum_vacuum_scale_factor=0', 'autovacuum_vacuum_threshold=200', 'autovacuum_vacuum_cost_delay=0']
			FROM pg_class WHERE oid = '{w}'::regclass), false) THEN
		ALTER TABLE {w} SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200, autovacuum_vacuum_cost_delay = 0);
	END IF;
END
$do$`

// checkLogged refuses an UNLOGGED lease table: a crash empties it, and its
// counters start again at 1. A database without the table passes.
func (b *Backend) checkLogged(ctx context.Context) error {
	var persistence sql.NullString
	err := b.db.QueryRowContext(ctx, `SELECT relpersistence FROM pg_class WHERE oid = to_regclass($1)`, b.sql.table).Scan(&persistence)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("sqlbackend: check the lease table's persistence: %w", err)
	case persistence.String == "u":
		return b.refusal(ctx, "check", stateUnlogged)
	}
	return nil
}
