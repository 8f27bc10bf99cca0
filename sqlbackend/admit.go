package sqlbackend

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
)

// AdmitTx admits a write in the caller's own transaction tx, on the database
// of this backend, only if token is the token of key's live lease at this
// moment, and makes every grant, renewal and release of key wait until tx
// ends: on PostgreSQL it takes a shared lock on the key that every grant,
// renewal and release of the key takes exclusively (at READ COMMITTED an
// advisory lock, which many concurrent AdmitTx share without writing to
// the lease row; at REPEATABLE READ and SERIALIZABLE the row's FOR SHARE
// lock), on SQLite tx takes the database's write lock. Otherwise it returns an
// error wrapping guard.ErrStaleToken, and the caller rolls tx back, so
// nothing of the write is applied.
//
// This is stronger than a high-water-mark fence (package guard's sqlguard):
// a fence refuses a token lower than one it has seen, so a stale holder
// whose successor has not written yet still gets through. AdmitTx refuses
// every token but the live one, and no later holder can be granted until
// tx has committed, so "the lease was live" and "the write was applied"
// hold together. The lease may run out while tx is open: no one else can
// have it meanwhile, and the holder's renewal waits for tx too.
//
// What it costs: a long transaction delays the next grant and the holder's
// own renewals (and on SQLite every operation on the file). Keep the
// transactions that call AdmitTx shorter than the lease's margin, or let
// the renewal's request timeout cover them; call AdmitTx last, just before
// COMMIT, when the rest of the transaction is slow. On PostgreSQL the
// lock is the transaction's own, so AdmitTx works behind PgBouncer in
// transaction pooling mode. A tx at REPEATABLE READ or SERIALIZABLE may get
// a serialization failure when the lease row changed since its snapshot:
// retry the transaction.
func (b *Backend) AdmitTx(ctx context.Context, tx *sql.Tx, key string, token uint64) error {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("%w: AdmitTx with a nil *sql.Tx", errInvalidConfig)
	}
	live, ok, err := b.dialect.admitToken(ctx, tx, key)
	if err != nil {
		return err
	}
	switch {
	case !ok:
		return fmt.Errorf("%w: no live lease", guard.ErrStaleToken)
	case token > MaxToken || live != int64(token):
		return fmt.Errorf("%w: token %d is not the live lease's", guard.ErrStaleToken, token)
	}
	return nil
}

// pgAdmit reads key's live token and holds off every grant, renewal and
// release of key until the caller's transaction ends. At READ COMMITTED it
// takes a shared transaction-scoped advisory lock on the key (the one the
// grant, renew and release functions take exclusively) and then reads the
// row in a new snapshot: many AdmitTx on one key share the lock without
// writing to the row, where FOR SHARE would record every sharer in a
// MultiXact (whose member space grows with the square of the sharers and
// must be vacuumed away). At REPEATABLE READ and SERIALIZABLE the
// transaction's snapshot may be older than the lock, so it locks the row
// FOR SHARE, which fails with a serialization error when the row changed
// since the snapshot.
const pgAdmit = `CREATE OR REPLACE FUNCTION {p}admit(p_key BYTEA) RETURNS BIGINT
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	tok BIGINT;
BEGIN
	IF current_setting('transaction_isolation') = 'read committed' THEN
		PERFORM pg_advisory_xact_lock_shared(hashtextextended('{t}:' || encode(p_key, 'hex'), 0));
		SELECT l.token INTO tok FROM {t} AS l WHERE l.key = p_key AND NOT l.released AND l.expires_at > clock_timestamp();
	ELSE
		SELECT l.token INTO tok FROM {t} AS l WHERE l.key = p_key AND NOT l.released AND l.expires_at > clock_timestamp() FOR SHARE;
	END IF;
	RETURN tok;
END
$fn$`
