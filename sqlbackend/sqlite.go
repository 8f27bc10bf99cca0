package sqlbackend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// sqlite is the SQLite dialect: the row dialects' code (rows.go) in BEGIN
// IMMEDIATE transactions, which take the database's write lock, on the
// host's boot clock (HostClock). Waiters poll (notify.go).
type sqlite struct{ rowDialect }

func newSQLite(b *Backend) (dialect, error) {
	if b.clock == nil {
		b.clock = SystemClock()
	}
	if err := b.noListener(); err != nil {
		return nil, err
	}
	b.sql = sqliteStatements(b.prefix)
	s := &sqlite{}
	s.rowDialect = rowDialect{b: b, eng: s}
	return s, nil
}

// noListener refuses WithListener on a dialect without NOTIFY.
func (b *Backend) noListener() error {
	if b.listenDSN != "" {
		return fmt.Errorf("%w: WithListener is for PostgreSQL", errInvalidConfig)
	}
	return nil
}

const sqliteTable = `CREATE TABLE IF NOT EXISTS {t} (
	key           BLOB PRIMARY KEY,
	token         INTEGER NOT NULL,
	lease_id      TEXT NOT NULL,
	released      INTEGER NOT NULL,
	boot_id       TEXT NOT NULL,
	expires_at    INTEGER NOT NULL,
	ttl_ns        INTEGER NOT NULL,
	margin_ns     INTEGER NOT NULL,
	owner         TEXT NOT NULL DEFAULT '',
	lock_delay_ns INTEGER NOT NULL DEFAULT 0,
	delay_until   INTEGER NOT NULL DEFAULT 0
)`

const sqliteWaiters = `CREATE TABLE IF NOT EXISTS {w} (
	key        BLOB NOT NULL,
	waiter_id  TEXT NOT NULL,
	seq        INTEGER NOT NULL,
	boot_id    TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (key, waiter_id)
) WITHOUT ROWID`

// sqliteStatements are SQLite's statements for prefix.
func sqliteStatements(prefix string) statements {
	s, r := newStatements(prefix)
	bare := channelName(prefix, "waiters") // the table's name without its schema, as CREATE INDEX ... ON takes it
	s.ddl = []string{r.Replace(sqliteTable), r.Replace(sqliteWaiters),
		r.Replace(`CREATE INDEX IF NOT EXISTS {w}_line ON ` + bare + ` (key, seq, expires_at, boot_id)`),
		r.Replace(`INSERT OR IGNORE INTO {t} (key, token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns) VALUES (x'', 0, '', 1, '', 0, 0, 0)`)}
	s.upgrade = []string{
		r.Replace(`ALTER TABLE {t} ADD COLUMN lock_delay_ns INTEGER NOT NULL DEFAULT 0`),
		r.Replace(`ALTER TABLE {t} ADD COLUMN delay_until INTEGER NOT NULL DEFAULT 0`),
	}
	const cols = `token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns, owner, lock_delay_ns, delay_until`
	s.read = r.Replace(`SELECT ` + cols + ` FROM {t} WHERE key = ?`)
	s.lockRead = s.read // the transaction holds the write lock already
	s.insert = r.Replace(`INSERT INTO {t} (key, ` + cols + `) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?)`)
	s.update = r.Replace(`UPDATE {t} SET token = ?, lease_id = ?, released = ?, boot_id = ?, expires_at = ?, ttl_ns = ?, margin_ns = ?, owner = ?, ` +
		`lock_delay_ns = ?, delay_until = ? WHERE key = ?`)
	s.list = r.Replace(`SELECT key, ` + cols + ` FROM {t} WHERE key <> x'' AND (?1 = 0 OR key > ?2) AND (?3 = 0 OR substr(key, 1, ?3) = ?4) ORDER BY key LIMIT ?5`)
	// A write that changes nothing: it takes the database's write lock in
	// the caller's transaction (AdmitTx).
	s.touch = r.Replace(`UPDATE {t} SET token = token WHERE key = ?`)
	// The queue: ?1 key, ?2 waiter, ?3 boot, ?4 now (since boot).
	const liveEntry = `boot_id = ?3 AND expires_at > ?4`
	s.renewEntry = r.Replace(`UPDATE {w} SET expires_at = ?5 WHERE key = ?1 AND waiter_id = ?2 AND ` + liveEntry)
	s.dropExpired = r.Replace(`DELETE FROM {w} WHERE key = ?1 AND NOT (` + liveEntry + `)`)
	// After dropExpired, every entry of the key is live: a new entry gets
	// the key's largest seq + 1.
	s.upsertEntry = r.Replace(`INSERT INTO {w} (key, waiter_id, seq, boot_id, expires_at) ` +
		`VALUES (?1, ?2, (SELECT coalesce(max(seq), 0) + 1 FROM {w} WHERE key = ?1), ?3, ?5) ` +
		`ON CONFLICT (key, waiter_id) DO UPDATE SET expires_at = excluded.expires_at`)
	// The place: how many live entries are ahead, the seq and end of the
	// live one directly ahead.
	s.ahead = r.Replace(`SELECT (SELECT count(*) FROM {w} AS a WHERE a.key = ?1 AND a.seq < m.seq AND a.boot_id = ?3 AND a.expires_at > ?4), ` +
		`coalesce(d.seq, 0), coalesce(d.expires_at, 0) ` +
		`FROM (SELECT seq FROM {w} WHERE key = ?1 AND waiter_id = ?2) AS m ` +
		`LEFT JOIN {w} AS d ON d.key = ?1 AND d.seq = ` +
		`(SELECT max(x.seq) FROM {w} AS x WHERE x.key = ?1 AND x.seq < m.seq AND x.boot_id = ?3 AND x.expires_at > ?4)`)
	s.anyEntry = r.Replace(`SELECT seq FROM {w} WHERE key = ?1 AND waiter_id = ?2`)
	s.removeEntry = r.Replace(`DELETE FROM {w} WHERE key = ?1 AND waiter_id = ?2`)
	s.behind = r.Replace(`SELECT waiter_id FROM {w} WHERE key = ?1 AND seq > ?5 AND ` + liveEntry + ` ORDER BY seq LIMIT 1`)
	// A key's live entries in order, for the poll.
	s.turn = r.Replace(`SELECT waiter_id, seq FROM {w} WHERE key = ?1 AND boot_id = ?2 AND expires_at > ?3 ORDER BY seq`)
	s.lineLength = r.Replace(`SELECT count(*) FROM {w} WHERE key = ?1 AND boot_id = ?2 AND expires_at > ?3`)
	// Retention: ?1 the boot, ?2 the moment (since boot) rows must have
	// been idle since, ?3 whether rows of another boot have (the boot is at
	// least the retention old), ?4 how many.
	s.records = r.Replace(`SELECT count(*) FROM {t} WHERE key <> x''`)
	s.floor = r.Replace(`SELECT token FROM {t} WHERE key = x''`)
	s.raiseFloor = r.Replace(`INSERT INTO {t} (key, token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns) VALUES (x'', ?, '', 1, '', 0, 0, 0) ` +
		`ON CONFLICT (key) DO UPDATE SET token = max(token, excluded.token)`)
	s.idleKeys = r.Replace(`SELECT key FROM {t} WHERE key <> x'' AND (boot_id <> ?1 AND ?3 OR boot_id = ?1 AND max(expires_at, delay_until) <= ?2) ` +
		`ORDER BY key LIMIT ?4`)
	s.lockKeys = [2]string{r.Replace(`SELECT key, ` + cols + ` FROM {t} WHERE key IN (`), `)`}
	s.deleteKeys = [2]string{r.Replace(`DELETE FROM {t} WHERE key IN (`), `)`}
	s.dropDead = r.Replace(`DELETE FROM {w} WHERE (key, waiter_id) IN (SELECT key, waiter_id FROM {w} ` +
		`WHERE boot_id <> ?1 AND ?3 OR boot_id = ?1 AND expires_at <= ?2 LIMIT ?4)`)
	return s
}

// createTables runs DDL, and the statements of upgrade whose column is
// missing, in one transaction.
func (s *sqlite) createTables(ctx context.Context) error {
	return s.tx(ctx, "create tables", func(c querier, _ hostNow) error {
		for _, stmt := range s.b.sql.ddl {
			if _, err := c.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		for _, stmt := range s.b.sql.upgrade {
			if _, err := c.ExecContext(ctx, stmt); err != nil && !strings.Contains(err.Error(), "duplicate column name") {
				return err
			}
		}
		return nil
	})
}

// checkSafety refuses a journal that does not survive a crash
// (journal_mode MEMORY or OFF) and synchronous below FULL, with which a
// power loss can undo a commit (in WAL mode with NORMAL, the last
// transactions before the loss; in rollback mode, the file can corrupt),
// and a file it cannot write. It reads one connection of the pool: the
// others come from the same connection string.
func (s *sqlite) checkSafety(ctx context.Context) error {
	b := s.b
	var mode string
	var syncLevel int
	// A busy database (another connection switching the journal mode as
	// it opens) is waited for, not reported.
	if err := retryBusy(ctx, func() error { return b.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode) }); err != nil {
		return fmt.Errorf("sqlbackend: check the SQLite database (is it a writable SQLite file?): %w", err)
	}
	if err := retryBusy(ctx, func() error { return b.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncLevel) }); err != nil {
		return fmt.Errorf("sqlbackend: check the SQLite database: %w", err)
	}
	switch strings.ToLower(mode) {
	case "memory", "off":
		return &SafetyError{Setting: "journal_mode", Value: mode, Fix: "use journal_mode WAL (or DELETE) on a file"}
	}
	if syncLevel < 2 {
		return &SafetyError{Setting: "synchronous", Value: [...]string{"OFF", "NORMAL"}[syncLevel], Fix: "use synchronous FULL (the default) or EXTRA in the connection string, e.g. _pragma=synchronous(FULL)"}
	}
	// The write lock, taken and given back: a read-only file or
	// connection fails here rather than at the first grant.
	var conn *sql.Conn
	if err := retryBusy(ctx, func() (err error) { conn, err = b.db.Conn(ctx); return err }); err != nil {
		return fmt.Errorf("sqlbackend: check the SQLite database: %w", err)
	}
	defer conn.Close()
	if err := retryBusy(ctx, func() error {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		return err
	}); err != nil {
		// The driver can report a context's end for a BEGIN that did
		// begin: the connection is not put back in the pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if ctx.Err() != nil {
			return fmt.Errorf("sqlbackend: check the SQLite database: %w", err)
		}
		return &SafetyError{Setting: "write access", Value: err.Error(), Fix: "open a file this process may write (not mode=ro), in a writable directory"}
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	var version int64
	err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version)
	if err == nil { // the same value, rolled back: a write that changes nothing
		_, err = conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", version))
	}
	if err != nil {
		return &SafetyError{Setting: "write access", Value: err.Error(), Fix: "open a file this process may write (not mode=ro), in a writable directory"}
	}
	return nil
}

// schemaGaps reads the tables' columns (pragma_table_info): the columns of
// lock delay, and the waiters table, are what an earlier release lacks.
func (s *sqlite) schemaGaps(ctx context.Context) (missing []string, tables bool, err error) {
	b := s.b
	schema, table, waiters := "main", b.sql.table, b.sql.waiters
	if sc, rest, ok := strings.Cut(b.prefix, "."); ok {
		schema, table, waiters = sc, rest+"leases", rest+"waiters"
	}
	cols := map[string]bool{}
	rows, err := b.db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?1, ?2)`, table, schema)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, false, err
		}
		cols[name] = true
	}
	if err := rows.Err(); err != nil || len(cols) == 0 {
		return nil, false, err
	}
	for _, c := range []string{"lock_delay_ns", "delay_until"} {
		if !cols[c] {
			missing = append(missing, "column "+c+" of "+b.sql.table)
		}
	}
	var n int
	if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?1, ?2)`, waiters, schema).Scan(&n); err != nil {
		return nil, false, err
	}
	if n == 0 {
		missing = append(missing, "table "+b.sql.waiters)
	}
	return missing, true, nil
}

// token reads the row in a BEGIN IMMEDIATE transaction, so the read is
// ordered with every write.
func (s *sqlite) token(ctx context.Context, key string) (uint64, bool, error) {
	var token uint64
	var live bool
	err := s.tx(ctx, "token", func(c querier, now hostNow) error {
		r, found, now, err := s.lockRow(ctx, c, key)
		if found && r.live(now) {
			token, live = uint64(r.token), true
		}
		return err
	})
	return token, live, err
}

// inspect reads a live lease's row without the write lock: the row is read
// first (WAL: a snapshot, never waiting for a writer), the clock after it.
// A lease live at that later clock reading was live when the row was read,
// since its end only moves later; so the answer is the state at the read.
// Anything else (no lease live, a read that failed) is asked again in a
// transaction that holds the write lock, as Redis's pipelined token check
// falls back to its script.
func (s *sqlite) inspect(ctx context.Context, key string) (backend.KeyState, error) {
	r, found, now, err := s.readRow(ctx, s.b.db, key)
	if err == nil && found && r.live(now) {
		return r.state(now), nil
	}
	var st backend.KeyState
	err = s.tx(ctx, "inspect", func(c querier, now hostNow) error {
		r, found, now, err := s.lockRow(ctx, c, key)
		if found {
			st = r.state(now)
		}
		return err
	})
	return st, err
}

// admitToken takes the write lock in tx with a write that changes nothing
// (or fails, if another connection holds it past the busy timeout); from
// then on tx reads the latest commit and no other writer can run.
func (s *sqlite) admitToken(ctx context.Context, tx *sql.Tx, key string) (int64, bool, error) {
	if _, err := tx.ExecContext(ctx, s.b.sql.touch, []byte(key)); err != nil {
		if missingSchema(err) {
			return 0, false, s.b.schemaError(ctx, "admit", err)
		}
		return 0, false, fmt.Errorf("sqlbackend: admit: take the write lock: %w", err)
	}
	r, found, now, err := s.readRow(ctx, tx, key)
	if err != nil {
		return 0, false, fmt.Errorf("sqlbackend: admit: %w", err)
	}
	if !found || !r.live(now) {
		return 0, false, nil
	}
	return r.token, true, nil
}

func (s *sqlite) pollInterval() time.Duration { return sqlitePoll }

// sweepClock is the HostClock's time since boot (a fake clock in tests
// moves it).
func (s *sqlite) sweepClock() int64 { return s.b.hostNow().since }

// scanRow reads the row, then the host's clock.
func (s *sqlite) scanRow(ctx context.Context, q querier, query, key string) (r leaseRow, found bool, now hostNow, err error) {
	err = q.QueryRowContext(ctx, query, []byte(key)).Scan(r.fields()...)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, s.b.hostNow(), nil
	}
	return r, err == nil, s.b.hostNow(), err
}

// txNow is the clock read when the transaction took the write lock.
func (s *sqlite) txNow(_ context.Context, _ querier, now hostNow) (hostNow, error) { return now, nil }

// lockLine: the transaction's write lock holds the line.
func (s *sqlite) lockLine(_ context.Context, _ querier, _ string, now hostNow) (hostNow, error) {
	return now, nil
}

func (s *sqlite) pollNow() hostNow { return s.b.hostNow() }

// retryBusy runs fn until it returns anything but SQLITE_BUSY, or ctx ends.
func retryBusy(ctx context.Context, fn func() error) error {
	wait := busyFirstWait
	for {
		err := fn()
		if !busy(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (waiting for the database's write lock: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, busyMaxWait)
	}
}

// tx runs fn in a BEGIN IMMEDIATE transaction on one connection of the
// pool: it takes the database's write lock (waiting while another
// connection or process holds it), then reads the host clock, so the
// request is dated when it is processed. fn's error rolls the transaction
// back; nothing of it is applied. A COMMIT that fails leaves the outcome
// unknown. what names the operation for errors.
//
// The transactions of one Backend run one at a time, in the order they
// came (SQLite has one writer at a time anyway): they wait for each other
// on a channel rather than in SQLite's busy handler, which sleeps between
// tries and lets a newcomer pass a waiter, so that under load no
// operation (a renewal) is passed over for long. Other processes (and
// other Backends on the file) still meet in the busy handler.
func (s *sqlite) tx(ctx context.Context, what string, fn func(c querier, now hostNow) error) (err error) {
	b := s.b
	select {
	case b.writer <- struct{}{}:
		defer func() { <-b.writer }()
	case <-ctx.Done():
		return fmt.Errorf("sqlbackend: %s: %w (waiting for this backend's other transactions)", what, ctx.Err())
	}
	var conn *sql.Conn
	// Opening a connection can find the database busy too (a pragma of
	// the connection string, such as journal_mode, needing a lock).
	if err := retryBusy(ctx, func() (err error) { conn, err = b.db.Conn(ctx); return err }); err != nil {
		return fmt.Errorf("sqlbackend: %s: %w", what, err)
	}
	discard := false
	defer func() {
		if discard { // a connection in an unknown transaction state is not reused
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}()
	if err := retryBusy(ctx, func() error {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		return err
	}); err != nil {
		// The driver can report a context's end for a BEGIN that did
		// begin: the connection may be inside a transaction.
		discard = true
		return fmt.Errorf("sqlbackend: %s: begin: %w", what, err)
	}
	if err := fn(conn, b.hostNow()); err != nil {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			discard = true
		}
		if isVerdict(err) {
			return err
		}
		if missingSchema(err) {
			return b.schemaError(ctx, what, err)
		}
		return fmt.Errorf("sqlbackend: %s: %w", what, err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitBound)
	defer cancel()
	if err := retryBusy(cctx, func() error {
		_, err := conn.ExecContext(cctx, "COMMIT")
		return err
	}); err != nil {
		discard = true
		return fmt.Errorf("sqlbackend: %s: commit: %w: %w", what, backend.ErrOutcomeUnknown, err)
	}
	return nil
}
