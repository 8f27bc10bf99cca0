// Package sqlbackend is a fencing backend on a SQL database: PostgreSQL for
// teams that run it already, MySQL (8.0 or later) and MariaDB (10.6 or
// later), and SQLite, a file that fences the processes of one host with
// nothing installed. It keeps the contract of package backend on all three,
// over database/sql: the pool is the caller's (New never opens and Close
// never closes it), with any driver on PostgreSQL and SQLite (the tests use
// pgx v5's stdlib adapter and modernc.org/sqlite) and go-sql-driver/mysql
// on MySQL.
//
//	db, _ := sql.Open("pgx", "postgres://app@db/app")
//	b, err := sqlbackend.New(ctx, db, sqlbackend.Postgres) // ctx bounds the safety check
//	if err != nil { ... }                   // e.g. a *SafetyError: fsync=off
//	if err := b.CreateTables(ctx); err != nil { ... } // or DDL() in a migration
//	c := fencing.New(b)
//
// CreateTables also brings the tables of an earlier release up to date (see
// Upgrading below).
//
// # Storage and tokens
//
// One table, <prefix>leases (DefaultPrefix "fencing_", WithTablePrefix for
// another), holds a row per key leased within the retention (see
// Retention), keyed by the key's bytes (any bytes, up to
// backend.MaxKeyLength). Its token column is the key's counter, raised by
// the statement that grants, and a key with no row starts above the floor
// row, so a token is never reissued, also after a crash (as far as the
// database keeps its commits: see the safety checks). On SQLite tokens are dense (1, 2,
// 3...; a refused grant uses none) and end at MaxToken (math.MaxInt64,
// SQL's largest integer) with backend.ErrTokenSpaceExhausted. On
// PostgreSQL a token is epoch<<EpochShift | counter, the epoch being the
// WAL timeline (plus a base kept in <prefix>cluster): a promoted standby
// or a point-in-time recovery grants tokens above every token of the
// server it replaces, also the ones asynchronous replication lost (see
// TokenEpoch, ClusterError and docs/sql.md). Other tables in the schema
// (package sqlguard's fencing_fences) do not clash.
//
// # PostgreSQL
//
// Every operation is one statement and one round trip: Grant, Renew,
// Release, ForceRelease, Enqueue and Dequeue call PL/pgSQL functions that
// CreateTables installs, which lock the key's row (SELECT ... FOR UPDATE) and decide
// with clock_timestamp(), the server's clock at that moment (not now(),
// which is when the transaction began); Token and Inspect are one SELECT
// each. Lease.ExpiresAt is on the server's clock. Nothing keeps session
// state (no session advisory locks, no SET; the line's functions take a
// transaction-scoped advisory lock, which ends with their statement), so
// the backend works behind PgBouncer
// in transaction pooling mode; with pgx before PgBouncer 1.21, use a
// connection string with default_query_exec_mode=exec (or simple_protocol),
// as pgx's default caches named prepared statements per connection (New
// reports the clash as backend.ErrInvalidConfig). Set PgBouncer's
// server_login_retry to 1 second: after a login fails while PostgreSQL
// restarts, PgBouncer refuses logins for that long (15 seconds by
// default), and every renewal in that time fails. The listener session
// of WithListener must reach the server directly.
//
// CreateTables may run in every replica at once: on PostgreSQL it runs the
// DDL in one transaction behind a transaction-scoped advisory lock.
//
// A statement whose connection broke after it was sent returns an error
// wrapping backend.ErrOutcomeUnknown; a resend with the same lease ID
// learns what happened (the grant function answers a resend with the same
// lease). An error that proves nothing was sent (the dial refused, the
// driver's driver.ErrBadConn) and any error the server answered with are
// plain errors.
//
// # MySQL and MariaDB
//
// Every writing operation is one InnoDB transaction on one connection of
// the pool: the key's row is read with the server's clock, SYSDATE(6), in
// one SELECT ... FOR UPDATE (the clock is read once the lock is held), the
// decision is the SQLite dialect's, in Go, and the row is written back.
// A statement that fails before COMMIT applied nothing; a COMMIT without an
// answer is backend.ErrOutcomeUnknown. Tokens are dense, as on SQLite. New
// refuses innodb_flush_log_at_trx_commit other than 1, sync_binlog other
// than 1 with the binary log on, read_only, a session time zone with
// daylight saving and a table that is not InnoDB (see mysql.go and
// docs/sql.md). Waiters poll. Add interpolateParams=true to the DSN: one
// round trip per statement rather than two.
//
// # SQLite
//
// Every operation is a BEGIN IMMEDIATE transaction on one connection of the
// pool: it takes the file's write lock (retrying SQLITE_BUSY until the
// context ends), then reads the host's clock, so a request is dated when it
// is processed and a read is ordered with every write. The coordinator's
// clock is the host's boot clock (see HostClock): a lease's end is stored
// as a reading of CLOCK_BOOTTIME with the boot ID, so stepping the wall
// clock neither extends nor shortens a live lease, and after a reboot every
// lease is expired. Outside Linux the wall clock is used and a step moves
// lease ends. The file must be on a local disk of the one host whose
// processes share it (not a network file system).
//
// # Waiting
//
// The backend implements backend.Notifier (and backend.Queuer, below). On
// PostgreSQL with WithListener one session LISTENs (kept for a second after
// the last subscription, so that consecutive Locks share it) and the
// release functions NOTIFY in their own transaction, so a waiter wakes
// when the release commits; without a listener, one goroutine per Backend
// asks every 100 ms, in one statement for all the keys waited on, which are
// free. On SQLite that goroutine reads the rows of the keys waited on every
// 10 ms: polling, outside any transaction, with a connection of the pool
// taken only for each read. Either way, fencing.Coordinator.Lock also
// sleeps until a held lease's end.
//
// # Lock delay
//
// A lease granted with backend.Request.LockDelay (fencing.WithLockDelay)
// keeps its delay in its row (lock_delay_ns), and the row says until when
// the key stays closed after an unclean end (delay_until: the lease's end
// plus the delay, kept by every renewal; after a forced release, that
// moment plus the delay; after a release by the holder, none). The grant
// judges it in the same statement (PostgreSQL, on the server's clock) or
// transaction (SQLite, on the host's boot clock) as the live lease, and
// refuses with a *backend.HeldError whose Delayed is set and whose
// Remaining is the delay's time left. Inspect and List report it
// (KeyState.DelayedUntil, DelayRemaining); Token, AdmitTx and the guards see
// no live lease during a delay, as after any end. NotifyFree treats a
// delayed key as not free and, when it polls, wakes its waiters when the
// delay ends.
//
// # Waiting in line
//
// The backend implements backend.Queuer over a second table,
// <prefix>waiters: an entry per waiter with its place (a sequence number
// per key) and its end on the same clock as a lease's. Enqueue drops the
// key's expired entries, renews the waiter's entry in place or adds it at
// the end, and reads the place, in one statement or transaction; on
// PostgreSQL a transaction-scoped advisory lock on the key orders joins and
// leaves. NotifyTurn wakes only the waiter directly behind an entry that
// left: on PostgreSQL with WithListener the dequeue function NOTIFYs that
// waiter (by a hash of its ID, which is a credential); otherwise the
// polling goroutine reads, for each subscribed waiter, which entry is
// directly ahead of it, and wakes it when that entry changed (a Dequeue or,
// since the poll judges expiry by the coordinator's clock, an expiry).
//
// # Retention
//
// A key that has had no live lease and no lock delay for the retention
// (WithRetention; DefaultRetention, 24 hours, unless set; 0 keeps every
// row) loses its row, and a line's entries that expired the retention ago
// go too. Passes delete idle rows a batch of 1000 per transaction; a
// Grant, GrantMany, Renew or Release that finds a pass due (retention/8
// after the last one ended) starts one in a goroutine of its own, which
// ends with the pass or at Close. So a key idle for the retention is gone
// within about an eighth of the retention more and a pass, as long as
// the backend is called; a backend nobody calls deletes nothing. The
// transaction that deletes rows raises the floor row (the row of the
// empty key, which no request can name) to their highest token; a grant
// on a key with no row mints the floor's next token, read after the grant
// holds the key's lock (PostgreSQL: the key's advisory lock, the floor
// read in a snapshot of its own; MySQL: the row's lock, the floor read
// with a locking read; SQLite: BEGIN IMMEDIATE), so a grant that races a
// reclamation of its key either finds the row, which the reclamation then
// keeps, or reads the floor the reclamation raised. The floor is one row
// per table, read and never written by a grant; on PostgreSQL it carries
// the epoch, so a promoted standby's grants outrank it as they outrank
// every row. A reclaimed key answers as one never leased: Token none,
// Inspect the zero KeyState (MaxToken 0), List leaves it out, an old lease
// ID's Renew or Release gets backend.ErrLeaseNotFound, a resent grant a
// new lease above the old tokens. Tokens are dense on a key only while it
// keeps its row. Size (backend.Sizer) counts the key rows and the keys this
// Backend reclaimed.
//
// # Upgrading
//
// The floor needs no new table: CreateTables inserts its row, and the
// first reclamation does on tables where it is missing. On PostgreSQL
// CreateTables also installs the reclaim function and the next_token that
// reads the floor; until it runs, grants work as before and passes fail
// (logged as a warning), deleting nothing. Processes of earlier releases
// do not read the floor: on SQLite and MySQL one of them granting a
// reclaimed key would start its tokens again from 1, so upgrade them all
// (or give the new ones WithRetention(0)) before any key can have been
// idle for the retention. On PostgreSQL their grants call next_token,
// which CreateTables replaces, and read the floor like this release's.
//
// The tables of the release before lock delay and the line lack two
// columns and the waiters table. CreateTables adds them: on PostgreSQL
// with ADD COLUMN IF NOT EXISTS, after a look in the catalog so that an
// up-to-date table is not locked (DDL does the same); on SQLite with ALTER
// TABLE in one transaction, skipping the columns a table has (DDL gives
// the two statements for a migration). A live lease
// survives the upgrade. Until then, an operation that needs what is
// missing returns an error wrapping ErrOldSchema that names it and
// CreateTables (New does not fail, so that CreateTables can run). On
// PostgreSQL the earlier release's five-argument grant function is
// replaced by a grant without a delay that honours running delays, so that
// processes of that release can keep running during the upgrade; on SQLite
// they read and write rows themselves and do not know lock delays: upgrade
// them all before any process uses WithLockDelay.
//
// # Safety checks
//
// New refuses a database that can lose committed tokens or cannot take
// writes, with a *SafetyError naming the setting and the fix: on PostgreSQL
// fsync=off, synchronous_commit=off, a standby, a read-only session and an
// UNLOGGED lease table; on SQLite journal_mode MEMORY or OFF and
// synchronous below FULL. WithSafetyCheck(backend.CheckSkip) skips them, for throw-away
// test databases. On PostgreSQL every grant and renewal checks again, in
// its own statement, what a pooler or an application can change after New:
// a session with synchronous_commit off, a standby, an unlogged lease
// table (a *SafetyError), tables copied from another cluster (a
// *ClusterError).
//
// # The lease inside the writer's transaction
//
// AdmitTx admits a write in the caller's own transaction only while the
// token's lease is live, and holds every grant, renewal and release of that
// key until the transaction ends; see AdmitTx and docs/sql.md.
package sqlbackend
