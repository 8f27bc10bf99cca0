package sqlbackend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencing-go/fencing/backend"
)

// MySQL runs the same Go code as SQLite (records.go's row, decided in
// Go), with the server's clock and InnoDB's row locks in place of the
// host's clock and SQLite's write lock. Each writing operation is one
// transaction on one connection of the pool:
//
//	START TRANSACTION
//	SELECT <the row>, <the server's clock> ... FOR UPDATE
//	INSERT or UPDATE <the row>        (skipped when the answer is a refusal)
//	COMMIT
//
// MySQL has no RETURNING on UPDATE; a stored procedure that returns the
// row would save two round trips, but CREATE PROCEDURE needs a privilege
// (and under binary logging log_bin_trust_function_creators) that
// application accounts often lack, and its OUT parameters cost a second
// statement to read. A statement that fails before COMMIT applied nothing
// (the server rolls back the transaction of a connection it loses); only a
// COMMIT without an answer leaves the outcome unknown.
//
// The clock is SYSDATE(6), the moment it is evaluated, read in the
// statement that locks the row, after the lock is held: NOW(6) is when the
// statement began, before any wait for the lock, and would judge a lease
// that ended during the wait live. SYSDATE is unsafe for statement-based
// replication, but it is only read: the value is written as a number, so
// every binlog format replays the same row.

// mysqlNow is the server's clock in nanoseconds since the Unix epoch
// (microsecond resolution).
const mysqlNow = `(CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED) * 1000)`

// serverNow is a reading of mysqlNow as a hostNow: one boot (the server's
// wall clock is the coordinator's), nanoseconds since the epoch.
func serverNow(nanos int64) hostNow {
	return hostNow{since: nanos, wall: time.Unix(0, nanos)}
}

const mysqlTable = "CREATE TABLE IF NOT EXISTS {t} (\n" +
	"	`key`         VARBINARY(1024) NOT NULL PRIMARY KEY,\n" +
	`	token         BIGINT NOT NULL,
	lease_id      VARBINARY(128) NOT NULL,
	released      BOOLEAN NOT NULL,
	expires_at    BIGINT NOT NULL,
	ttl_ns        BIGINT NOT NULL,
	margin_ns     BIGINT NOT NULL,
	owner         VARBINARY(256) NOT NULL DEFAULT '',
	lock_delay_ns BIGINT NOT NULL DEFAULT 0,
	delay_until   BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB`

const mysqlWaiters = "CREATE TABLE IF NOT EXISTS {w} (\n" +
	"	`key`      VARBINARY(1024) NOT NULL,\n" +
	`	waiter_id  VARBINARY(128) NOT NULL,
	seq        BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	PRIMARY KEY (` + "`key`" + `, waiter_id)
) ENGINE=InnoDB`

// mysqlStatements fills s for MySQL. Statements with more than one
// argument are written with SQLite's numbered parameters (?1, ?2), in the
// order the shared Go code passes them, and rewritten to MySQL's ? with
// the order recorded (mysqlArgs reorders).
func mysqlStatements(s *statements, r *strings.Replacer) {
	s.order = map[string][]int{}
	num := func(q string) string {
		q, order := numbered(r.Replace(strings.ReplaceAll(q, "key", "`key`")))
		s.order[q] = order
		return q
	}
	s.ddl = []string{r.Replace(mysqlTable), r.Replace(mysqlWaiters),
		r.Replace("INSERT INTO {t} (`key`, token, lease_id, released, expires_at, ttl_ns, margin_ns) VALUES ('', 0, '', 1, 0, 0, 0) " +
			"ON DUPLICATE KEY UPDATE token = token")}
	// The row of the key (NULLs when there is none), whether there is
	// one, and the clock after it.
	const cols = `coalesce(l.token, 0), coalesce(l.lease_id, ''), coalesce(l.released, 0), '', coalesce(l.expires_at, 0), ` +
		`coalesce(l.ttl_ns, 0), coalesce(l.margin_ns, 0), coalesce(l.owner, ''), coalesce(l.lock_delay_ns, 0), coalesce(l.delay_until, 0), ` +
		"l.`key` IS NOT NULL, " + mysqlNow
	s.read = r.Replace(`SELECT ` + cols + " FROM (SELECT 1 AS x) AS d LEFT JOIN {t} AS l ON l.`key` = ?")
	s.lockRead = s.read + ` FOR UPDATE`
	// The row under a shared lock (FOR SHARE is MySQL 8's only): AdmitTx's
	// read, and mysqlReadRow's second.
	s.admit = s.read + ` LOCK IN SHARE MODE`
	const rowCols = `token, lease_id, released, expires_at, ttl_ns, margin_ns, owner, lock_delay_ns, delay_until`
	s.insert = num(`INSERT INTO {t} (key, ` + rowCols + `) VALUES (?1, ?2, ?3, 0, ?5, ?6, ?7, ?8, ?9, ?10)`)
	s.update = num(`UPDATE {t} SET token = ?1, lease_id = ?2, released = ?3, expires_at = ?5, ttl_ns = ?6, margin_ns = ?7, owner = ?8, ` +
		`lock_delay_ns = ?9, delay_until = ?10 WHERE key = ?11`)
	s.list = num(`SELECT key, token, lease_id, released, '', expires_at, ttl_ns, margin_ns, owner, lock_delay_ns, delay_until FROM {t} ` +
		`WHERE key <> '' AND (?1 = 0 OR key > ?2) AND (?3 = 0 OR SUBSTRING(key, 1, ?3) = ?4) ORDER BY key LIMIT ?5`)
	s.now = `SELECT ` + mysqlNow
	// The line: its entries locked (and, with none, the gap where they
	// would go), the clock after them.
	s.lockLine = r.Replace(`SELECT ` + mysqlNow + " FROM (SELECT 1 AS x) AS d LEFT JOIN {w} AS w ON w.`key` = ? FOR UPDATE")
	// The queue: ?1 key, ?2 waiter, ?3 boot (unused), ?4 now, ?5 the
	// entry's end or a seq, as for SQLite.
	s.renewEntry = num(`UPDATE {w} SET expires_at = ?5 WHERE key = ?1 AND waiter_id = ?2 AND expires_at > ?4`)
	s.dropExpired = num(`DELETE FROM {w} WHERE key = ?1 AND expires_at <= ?4`)
	s.upsertEntry = num(`INSERT INTO {w} (key, waiter_id, seq, expires_at) SELECT ?1, ?2, coalesce(max(seq), 0) + 1, ?5 FROM {w} WHERE key = ?1`)
	s.ahead = num(`SELECT (SELECT count(*) FROM {w} AS a WHERE a.key = ?1 AND a.seq < m.seq AND a.expires_at > ?4), ` +
		`coalesce(d.seq, 0), coalesce(d.expires_at, 0) ` +
		`FROM (SELECT seq FROM {w} WHERE key = ?1 AND waiter_id = ?2) AS m ` +
		`LEFT JOIN {w} AS d ON d.key = ?1 AND d.seq = ` +
		`(SELECT max(x.seq) FROM {w} AS x WHERE x.key = ?1 AND x.seq < m.seq AND x.expires_at > ?4)`)
	s.anyEntry = num(`SELECT seq FROM {w} WHERE key = ?1 AND waiter_id = ?2`)
	s.removeEntry = num(`DELETE FROM {w} WHERE key = ?1 AND waiter_id = ?2`)
	s.behind = num(`SELECT waiter_id FROM {w} WHERE key = ?1 AND seq > ?5 AND expires_at > ?4 ORDER BY seq LIMIT 1`)
	// A key's live entries in order, for the poll, on the server's clock
	// (?2 and ?3, the host's, are not used).
	s.turn = num(`SELECT waiter_id, seq FROM {w} WHERE key = ?1 AND expires_at > ` + mysqlNow + ` ORDER BY seq`)
	s.lineLength = r.Replace("SELECT count(*) FROM {w} WHERE `key` = ? AND expires_at > " + mysqlNow)
	// Retention (retention.go), with SQLite's arguments: ?2 the moment
	// rows must have been idle since, ?4 how many (?1 and ?3, of boots,
	// are not used). The floor is read with a locking read, which sees the
	// latest commit: a plain read would see the transaction's snapshot, from
	// before a reclamation the grant waited for. Idle rows are locked by
	// primary key in key order.
	s.records = r.Replace("SELECT count(*) FROM {t} WHERE `key` <> ''")
	s.floor = r.Replace("SELECT token FROM {t} WHERE `key` = '' LOCK IN SHARE MODE")
	s.lockFloor = r.Replace("SELECT token FROM {t} WHERE `key` = '' FOR UPDATE")
	s.raiseFloor = r.Replace("INSERT INTO {t} (`key`, token, lease_id, released, expires_at, ttl_ns, margin_ns) VALUES ('', ?, '', 1, 0, 0, 0) " +
		"ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))")
	s.idleKeys = num(`SELECT key FROM {t} WHERE key <> '' AND GREATEST(expires_at, delay_until) <= ?2 ORDER BY key LIMIT ?4`)
	s.lockKeys = [2]string{r.Replace("SELECT `key`, token, lease_id, released, '', expires_at, ttl_ns, margin_ns, owner, lock_delay_ns, delay_until " +
		"FROM {t} WHERE `key` IN ("), ") ORDER BY `key` FOR UPDATE"}
	s.deleteKeys = [2]string{r.Replace("DELETE FROM {t} WHERE `key` IN ("), ")"}
	s.dropDead = num(`DELETE FROM {w} WHERE expires_at <= ?2 LIMIT ?4`)
}

var numberedParam = regexp.MustCompile(`\?([0-9]+)`)

// numbered rewrites q's numbered parameters (?1) to ?, and returns the
// argument index of each.
func numbered(q string) (string, []int) {
	var order []int
	q = numberedParam.ReplaceAllStringFunc(q, func(p string) string {
		n, _ := strconv.Atoi(p[1:])
		order = append(order, n-1)
		return "?"
	})
	return q, order
}

// mysqlArgs passes the arguments of a statement written with numbered
// parameters in the order its ? take them. Other statements (and every
// statement on SQLite) pass through.
type mysqlArgs struct {
	q querier
	s *statements
}

func (m mysqlArgs) args(query string, args []any) []any {
	order, ok := m.s.order[query]
	if !ok {
		return args
	}
	out := make([]any, len(order))
	for i, n := range order {
		out[i] = args[n]
	}
	return out
}

func (m mysqlArgs) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return m.q.QueryRowContext(ctx, query, m.args(query, args)...)
}

func (m mysqlArgs) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return m.q.QueryContext(ctx, query, m.args(query, args)...)
}

func (m mysqlArgs) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return m.q.ExecContext(ctx, query, m.args(query, args)...)
}

// txNow is the coordinator's clock inside a transaction: now on SQLite
// (read when the write lock was taken), the server's on MySQL.
func (b *Backend) txNow(ctx context.Context, c querier, now hostNow) (hostNow, error) {
	if b.dialect != MySQL {
		return now, nil
	}
	var nanos int64
	err := c.QueryRowContext(ctx, b.sql.now).Scan(&nanos)
	return serverNow(nanos), err
}

// mysqlReadRow reads key's row and the server's clock on the pool, for
// Token and Inspect: the state of the key at one moment of the call.
//
// The first read takes no lock: the row is read in a snapshot at S (never
// waiting for a writer), the server's clock after it at N. No row at S,
// a lease released at S or a lease live at N (it was live at S, since a
// lease's end only moves later) is the state at S. A lease that the row
// shows unreleased but ended by N is not: its holder may have renewed it
// between S and N, before its end, so that it never ended. That answer is
// read again under a shared lock, which waits for a writer of the row and
// reads its latest commit, and the clock after it: the state at that read.
func (b *Backend) mysqlReadRow(ctx context.Context, key string) (leaseRow, bool, hostNow, error) {
	r, found, now, err := b.readRow(ctx, b.db, key)
	if err != nil || !found || r.released || r.live(now) {
		return r, found, now, err
	}
	return b.scanRow(ctx, b.db, b.sql.admit, key)
}

// lockLine locks key's line for the transaction (on SQLite the write lock
// does) and returns the coordinator's clock after it.
func (b *Backend) lockLine(ctx context.Context, c querier, key string, now hostNow) (hostNow, error) {
	if b.dialect != MySQL {
		return now, nil
	}
	rows, err := c.QueryContext(ctx, b.sql.lockLine, []byte(key))
	if err != nil {
		return now, err
	}
	defer rows.Close()
	for rows.Next() {
		var nanos int64
		if err := rows.Scan(&nanos); err != nil {
			return now, err
		}
		now = serverNow(max(nanos, now.since))
	}
	return now, rows.Err()
}

// mysqlTx runs fn in a transaction on one connection of the pool (see the
// top of this file), again when InnoDB chose it as a deadlock's victim or
// a concurrent first grant of the key inserted the row first: both roll
// the whole transaction back.
func (b *Backend) mysqlTx(ctx context.Context, what string, fn func(c querier, now hostNow) error) error {
	wait := busyFirstWait
	serialized := false
	for {
		err := b.mysqlTxOnce(ctx, what, serialized, fn)
		var again *retryError
		if !errors.As(err, &again) {
			return err
		}
		if n, _ := mysqlNumber(again.err); n == 1213 && what == "grant" {
			serialized = true
		}
		if !sleepCtx(ctx, wait) {
			return fmt.Errorf("sqlbackend: %s: %w (retrying after %v)", what, ctx.Err(), again.err)
		}
		wait = min(2*wait, busyMaxWait)
	}
}

// A grant that InnoDB rolled back to break a deadlock takes the floor
// row's lock (lockFloor) before its key's when it runs again.
//
// The deadlocks are those of first grants of new keys: each one's SELECT
// ... FOR UPDATE finds no row and takes a gap lock, which the other gap
// locks do not block, and its INSERT into the gap waits for theirs. Run
// again as they were, the same transactions form the same cycles: 100 at
// once all timed out (TestMySQLConcurrentFirstGrants). Behind the floor
// row's lock the retried ones take their gap locks one at a time, so a
// retried grant can deadlock only with one that has not deadlocked yet,
// and each grant deadlocks about once.

// retryError is a transaction rolled back that mysqlTx runs again.
type retryError struct{ err error }

func (e *retryError) Error() string { return e.err.Error() }

func (b *Backend) mysqlTxOnce(ctx context.Context, what string, serialized bool, fn func(c querier, now hostNow) error) error {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return b.classify(ctx, what, err)
	}
	discard := false
	defer func() {
		if discard { // a connection in an unknown transaction state is not reused
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}()
	if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
		discard = true
		if errors.Is(err, driver.ErrBadConn) && ctx.Err() == nil {
			return &retryError{err}
		}
		return txError(ctx, what+": begin", err)
	}
	err = nil
	if serialized {
		var floor int64
		if err = conn.QueryRowContext(ctx, b.sql.lockFloor).Scan(&floor); errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
	}
	if err == nil {
		err = fn(mysqlArgs{conn, &b.sql}, hostNow{})
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitBound)
		defer cancel()
		if _, rerr := conn.ExecContext(rctx, "ROLLBACK"); rerr != nil {
			discard = true
		}
		switch n, _ := mysqlNumber(err); {
		case isVerdict(err):
			return err
		case n == 1213 || n == 1062: // deadlock; duplicate key
			return &retryError{err}
		case errors.Is(err, driver.ErrBadConn) && ctx.Err() == nil:
			// The driver found the connection closed before it sent the
			// statement (the watcher of an earlier statement's context
			// closes it when that context ends just after the statement).
			return &retryError{err}
		case missingSchema(err):
			return b.schemaError(ctx, what, err)
		}
		// Nothing was applied: the transaction did not commit.
		return txError(ctx, what, err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitBound)
	defer cancel()
	if _, err := conn.ExecContext(cctx, "COMMIT"); err != nil {
		discard = true
		if _, ok := mysqlNumber(err); ok { // the server answered: it did not commit
			return fmt.Errorf("sqlbackend: %s: commit: %w", what, err)
		}
		return fmt.Errorf("sqlbackend: %s: commit: %w: %w", what, backend.ErrOutcomeUnknown, err)
	}
	return nil
}

// txError wraps the error of a statement before COMMIT. When ctx has
// ended, it wraps ctx's error too: the driver reports a connection it
// closed for the ended context as driver.ErrBadConn or its own error, and
// the caller gives up with its context.
func txError(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("sqlbackend: %s: %w: %w", what, cerr, err)
	}
	return fmt.Errorf("sqlbackend: %s: %w", what, err)
}

// mysqlNumber returns the error number of a MySQL server error in err's
// chain.
func mysqlNumber(err error) (uint16, bool) {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number, true
	}
	return 0, false
}

// mysqlStartError is startError for a MySQL server's error, nil for any
// other.
func mysqlStartError(what string, err error) error {
	n, ok := mysqlNumber(err)
	switch {
	case !ok:
		return nil
	case n == 1045 || n == 1698: // access denied for the user (password, plugin)
		return fmt.Errorf("sqlbackend: %s: %w: %w", what, backend.ErrAuthRefused, err)
	case n == 1044 || n == 1142 || n == 1227 || n == 1370: // no privilege on the database, table, operation
		return fmt.Errorf("sqlbackend: %s: %w: %w", what, backend.ErrPermissionDenied, err)
	case n == 1046: // no database selected
		return fmt.Errorf("%w: %s: the DSN names no database, and the table prefix no schema: %w", errInvalidConfig, what, err)
	}
	return fmt.Errorf("sqlbackend: %s: %w", what, err)
}

// fixedOffset is a time zone with no daylight saving.
var fixedOffset = regexp.MustCompile(`^([+-][0-9]{1,2}:[0-9]{2}|UTC|GMT|Etc/UTC|Z)$`)

// checkMySQL refuses innodb_flush_log_at_trx_commit other than 1 (a crash
// loses up to a second of commits), sync_binlog other than 1 with the
// binary log on (a crash can lose commits that InnoDB then rolls back to
// agree with the log), read_only (a replica; super_read_only implies it),
// a session time zone with daylight saving (UNIX_TIMESTAMP of the local
// time is ambiguous for an hour a year, and leases would end early) and a
// lease table that is not InnoDB.
func (b *Backend) checkMySQL(ctx context.Context) error {
	var flush, syncBinlog, logBin, readOnly int
	var tz, systemTZ string
	var db sql.NullString
	err := b.db.QueryRowContext(ctx, `SELECT @@global.innodb_flush_log_at_trx_commit, @@global.sync_binlog, @@global.log_bin, @@global.read_only, `+
		`@@session.time_zone, @@global.system_time_zone, DATABASE()`).Scan(&flush, &syncBinlog, &logBin, &readOnly, &tz, &systemTZ, &db)
	if err != nil {
		return contactError("MySQL", "check the MySQL server's settings", err)
	}
	switch {
	case !db.Valid && !strings.Contains(b.prefix, "."):
		return fmt.Errorf("%w: the DSN names no database (add /dbname), and the table prefix no schema", errInvalidConfig)
	case readOnly != 0:
		return &SafetyError{Setting: "read_only", Value: "ON", Fix: "connect to the writable primary, not a replica"}
	case flush != 1:
		return &SafetyError{Setting: "innodb_flush_log_at_trx_commit", Value: strconv.Itoa(flush), Fix: "set innodb_flush_log_at_trx_commit = 1 (the default)"}
	case logBin != 0 && syncBinlog != 1:
		return &SafetyError{Setting: "sync_binlog", Value: strconv.Itoa(syncBinlog), Fix: "set sync_binlog = 1 (the binary log is on)"}
	case tz == "SYSTEM" && !fixedOffset.MatchString(systemTZ) || tz != "SYSTEM" && !fixedOffset.MatchString(tz):
		return &SafetyError{Setting: "time_zone", Value: tz + " (system: " + systemTZ + ")",
			Fix: "use a zone without daylight saving: add time_zone=%27%2B00%3A00%27 to the DSN, or run the server in UTC"}
	}
	return b.checkEngine(ctx)
}

// checkEngine refuses backend tables of an engine other than InnoDB
// (MyISAM and MEMORY have no transactions; MEMORY loses its rows at a
// restart, and the counters with them). Missing tables pass.
func (b *Backend) checkEngine(ctx context.Context) error {
	schema, table, waiters := b.schemaTables()
	rows, err := b.db.QueryContext(ctx, `SELECT table_name, engine FROM information_schema.tables `+
		`WHERE table_schema = coalesce(?, DATABASE()) AND table_name IN (?, ?)`, schema, table, waiters)
	if err != nil {
		return startError("check the engine of the tables", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, engine sql.NullString
		if err := rows.Scan(&name, &engine); err != nil {
			return startError("check the engine of the tables", err)
		}
		if !strings.EqualFold(engine.String, "InnoDB") {
			return &SafetyError{Setting: "the engine of table " + name.String, Value: engine.String,
				Fix: "ALTER TABLE " + name.String + " ENGINE=InnoDB"}
		}
	}
	return rows.Err()
}

// schemaTables splits the prefix: the schema (nil: the connection's
// database) and the names of the two tables in it.
func (b *Backend) schemaTables() (schema any, table, waiters string) {
	rest := b.prefix
	if s, r, ok := strings.Cut(b.prefix, "."); ok {
		schema, rest = s, r
	}
	return schema, rest + "leases", rest + "waiters"
}

// mysqlSchemaGaps is schemaGaps on MySQL: there is no earlier release to
// upgrade, only tables that are there or not.
func (b *Backend) mysqlSchemaGaps(ctx context.Context) (missing []string, tables bool, err error) {
	schema, table, waiters := b.schemaTables()
	var nt, nw int
	err = b.db.QueryRowContext(ctx, `SELECT count(CASE WHEN table_name = ? THEN 1 END), count(CASE WHEN table_name = ? THEN 1 END) `+
		`FROM information_schema.tables WHERE table_schema = coalesce(?, DATABASE())`, table, waiters, schema).Scan(&nt, &nw)
	if err != nil || nt == 0 {
		return nil, false, err
	}
	if nw == 0 {
		missing = append(missing, "table "+b.sql.waiters)
	}
	return missing, true, nil
}

// createTablesMySQL runs DDL: CREATE TABLE IF NOT EXISTS waits on the
// table's metadata lock for a concurrent one, and then finds the table.
func (b *Backend) createTablesMySQL(ctx context.Context) error {
	for _, stmt := range b.sql.ddl {
		if _, err := b.db.ExecContext(ctx, stmt); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("sqlbackend: create tables: %w", err)
			}
			return startError("create tables", err)
		}
	}
	return b.checkEngine(ctx)
}
