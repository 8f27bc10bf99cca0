// Package sqlguard fences a SQL database: the fence moves in the caller's own
// transaction, with the caller's write, and commits or rolls back with it.
//
// It uses database/sql only and imports no driver: open the database with
// the driver you already use (pgx's stdlib adapter, lib/pq, modernc.org/sqlite,
// mattn/go-sqlite3) and pass the Dialect that matches it.
//
// # Use
//
// Create the fences table (CreateTable, from every replica at start-up if
// you like, or run DDL in a migration),
// then, in each transaction that writes the protected data, admit the
// holder's token first:
//
//	g, err := sqlguard.New(sqlguard.Postgres)
//	...
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	if err := g.Admit(ctx, tx, "orders/42", lease.Token); err != nil {
//		return err // guard.ErrStaleToken: a later holder has written
//	}
//	if _, err := tx.ExecContext(ctx, `UPDATE orders SET total = $1 WHERE id = 42`, total); err != nil {
//		return err // the rollback undoes the Admit too
//	}
//	return tx.Commit()
//
// Write does the same around a function. Takeover, on the *sql.DB, admits
// with no write, in a transaction of its own: the fence at takeover of
// package guard. Admit takes only a *sql.Tx, so a fence meant for the
// write's transaction cannot be moved outside it by mistake:
//
//	if err := g.Takeover(ctx, db, "orders/42", lease.Token); err != nil {
//		return err // a later holder has already fenced this one out
//	}
//
// # Dropping a fence
//
// The fence row lives as long as the resource: nothing deletes it by time.
// Drop deletes it in the transaction that deletes the resource, after Admit
// in that transaction; keep it instead when the resource's name may be used
// again (see "Dropping a fence" in docs/guards.md).
//
// # How it works
//
// Admit runs one statement, an upsert on the fences table whose update only
// happens when the stored token is not higher than the new one:
//
//	INSERT INTO fencing_fences AS f (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
//	WHERE f.token <= EXCLUDED.token
//
// One row affected means the token was admitted; none means the stored
// token is higher, and Admit returns an error wrapping guard.ErrStaleToken
// (the transaction is still open: roll it back). The row stays locked until
// the transaction ends, so a concurrent writer of the same resource waits,
// and then sees the committed fence, not the one it read before.
//
// # Isolation
//
// PostgreSQL at READ COMMITTED (its default): a second transaction admitting
// on the same resource waits for the first to end and then re-checks its
// WHERE clause against the committed row, so it is refused if the first
// committed a higher token and admitted if the first rolled back. At
// REPEATABLE READ or SERIALIZABLE it fails instead with a serialization
// error (SQLSTATE 40001), to be retried like any other; it is never wrongly
// admitted.
//
// SQLite has one writer at a time. A transaction that begins deferred and
// then writes may get SQLITE_BUSY when another holds the write lock: open
// the database with a busy timeout and begin transactions IMMEDIATE (with
// modernc.org/sqlite: "?_pragma=busy_timeout(10000)&_txlock=immediate").
//
// # Tokens and names
//
// SQL integers are signed 64-bit, so a token above math.MaxInt64 gets a
// *TokenRangeError (which wraps guard.ErrInvalidToken) and nothing is sent;
// the tokens of every fencing backend fit (Redis tokens are int64 by
// construction; memory and etcd tokens would need 2^63 grants). Resource
// names are stored as bytes (BYTEA, BLOB), so any bytes are a name, as with
// lease keys.
package sqlguard
