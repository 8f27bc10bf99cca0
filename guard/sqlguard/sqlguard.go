package sqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/internal/storeopt"
)

// Dialect is the SQL spoken by one kind of database: Postgres, SQLite or
// MySQL.
type Dialect struct {
	name   string
	create string // CREATE TABLE, %[1]s is the table
	admit  string // the upsert: args resource, token
	fence  string // SELECT the token: arg resource
	lower  string // UPDATE the token: args to, resource, from
	clear  string // DELETE the fence: args resource, from
	drop   string // DELETE the fence whatever it is: arg resource
	// equal, when set, reads the fence with a lock after an admit that
	// changed no row: MySQL counts a row set to the value it had as
	// unchanged, so an admit of the fence's own token affects no row.
	equal string
}

// Dialects.
var (
	// Postgres is PostgreSQL 9.5 or later (ON CONFLICT), with any driver
	// (pgx's stdlib adapter, lib/pq), or a database that speaks its SQL.
	Postgres = Dialect{
		name:   "postgres",
		create: `CREATE TABLE IF NOT EXISTS %[1]s (resource BYTEA PRIMARY KEY, token BIGINT NOT NULL)`,
		admit: `INSERT INTO %[1]s AS f (resource, token) VALUES ($1, $2) ` +
			`ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token`,
		fence: `SELECT token FROM %[1]s WHERE resource = $1`,
		lower: `UPDATE %[1]s SET token = $1 WHERE resource = $2 AND token = $3`,
		clear: `DELETE FROM %[1]s WHERE resource = $1 AND token = $2`,
		drop:  `DELETE FROM %[1]s WHERE resource = $1`,
	}
	// SQLite is SQLite 3.24 or later (upsert), with any driver
	// (modernc.org/sqlite, mattn/go-sqlite3).
	SQLite = Dialect{
		name:   "sqlite",
		create: `CREATE TABLE IF NOT EXISTS %[1]s (resource BLOB PRIMARY KEY, token INTEGER NOT NULL)`,
		admit: `INSERT INTO %[1]s (resource, token) VALUES (?, ?) ` +
			`ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE token <= excluded.token`,
		fence: `SELECT token FROM %[1]s WHERE resource = ?`,
		lower: `UPDATE %[1]s SET token = ? WHERE resource = ? AND token = ?`,
		clear: `DELETE FROM %[1]s WHERE resource = ? AND token = ?`,
		drop:  `DELETE FROM %[1]s WHERE resource = ?`,
	}
	// MySQL is MySQL 8.0 or later, or MariaDB 10.6 or later, on an InnoDB
	// table, with github.com/go-sql-driver/mysql.
	MySQL = Dialect{
		name:   "mysql",
		create: `CREATE TABLE IF NOT EXISTS %[1]s (resource VARBINARY(1024) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB`,
		admit: `INSERT INTO %[1]s (resource, token) VALUES (?, ?) ` +
			`ON DUPLICATE KEY UPDATE token = IF(token <= VALUES(token), VALUES(token), token)`,
		fence: `SELECT token FROM %[1]s WHERE resource = ?`,
		lower: `UPDATE %[1]s SET token = ? WHERE resource = ? AND token = ?`,
		clear: `DELETE FROM %[1]s WHERE resource = ? AND token = ?`,
		drop:  `DELETE FROM %[1]s WHERE resource = ?`,
		equal: `SELECT token FROM %[1]s WHERE resource = ? FOR UPDATE`,
	}
)

// String returns the dialect's name: "postgres", "sqlite" or "mysql".
func (d Dialect) String() string { return d.name }

// DefaultTable is the fences table's name unless WithTable gives another.
const DefaultTable = "fencing_fences"

// TokenRangeError is returned for a token that a SQL integer (signed 64-bit)
// cannot hold. It wraps guard.ErrInvalidToken; nothing was sent.
type TokenRangeError struct {
	Token uint64
}

func (e *TokenRangeError) Error() string {
	return "sqlguard: token " + strconv.FormatUint(e.Token, 10) + " exceeds the largest SQL integer, " + strconv.FormatInt(math.MaxInt64, 10)
}

// Unwrap returns guard.ErrInvalidToken.
func (e *TokenRangeError) Unwrap() error { return guard.ErrInvalidToken }

// Execer runs a statement: a *sql.Tx, a *sql.DB or a *sql.Conn (for
// CreateTable).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Guard admits tokens in the fences table of one database. It holds no
// connection and is safe for concurrent use.
type Guard struct {
	dialect                                    Dialect
	table                                      string
	create, admitQL, fenceQL, lowerQL, clearQL string
	dropQL, equalQL                            string
	opts                                       storeopt.Shared
}

// Option configures a Guard.
type Option func(*Guard)

// WithTable names the fences table (default DefaultTable): an unquoted SQL
// identifier, optionally qualified by a schema ("app.fences").
func WithTable(name string) Option { return func(g *Guard) { g.table = name } }

// WithMeterProvider counts the writes the Guard refuses for a stale token on
// mp (guard.MetricStaleTokens; without this option the global provider, a
// no-op until an OpenTelemetry SDK is installed; a nil mp records nothing).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(g *Guard) { g.opts.SetMeterProvider(mp) }
}

// WithMintCheck makes the Guard refuse a token the lock store never minted,
// with an error wrapping guard.ErrNotMinted, before it sends anything (see
// guard.MintCheck). Use it when tokens come from the network.
func WithMintCheck(mc *guard.MintCheck) Option { return func(g *Guard) { g.opts.Mint = mc } }

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// New returns a Guard for a database of dialect d. A zero Dialect or a bad
// table name (WithTable) is an error wrapping backend.ErrInvalidConfig,
// the error of every backend's New for a bad argument.
func New(d Dialect, opts ...Option) (*Guard, error) {
	g := &Guard{dialect: d, table: DefaultTable}
	storeopt.Apply(g, &g.opts, "sqlguard", opts)
	if d.name == "" {
		return nil, fmt.Errorf("sqlguard: %w: no dialect (use sqlguard.Postgres, sqlguard.SQLite or sqlguard.MySQL)", backend.ErrInvalidConfig)
	}
	if !tableName.MatchString(g.table) {
		return nil, fmt.Errorf("sqlguard: %w: table name %q is not an unquoted identifier, optionally schema-qualified", backend.ErrInvalidConfig, g.table)
	}
	g.create = fmt.Sprintf(d.create, g.table)
	g.admitQL = fmt.Sprintf(d.admit, g.table)
	g.fenceQL = fmt.Sprintf(d.fence, g.table)
	g.lowerQL = fmt.Sprintf(d.lower, g.table)
	g.clearQL = fmt.Sprintf(d.clear, g.table)
	g.dropQL = fmt.Sprintf(d.drop, g.table)
	if d.equal != "" {
		g.equalQL = fmt.Sprintf(d.equal, g.table)
	}
	return g, nil
}

// DDL returns the statement that creates the fences table if it does not
// exist, for a migration tool.
func (g *Guard) DDL() string { return g.create }

// CreateTable runs DDL on ex. Any number of processes may run it at once,
// as the replicas of a deployment do when they start together: on
// PostgreSQL it runs in one statement that first takes a
// transaction-scoped advisory lock (createLockKey), so the creations run one
// after the other (PgBouncer's transaction pooling keeps it); on SQLite
// the database's lock orders them, with the busy timeout the package
// documentation asks for.
func (g *Guard) CreateTable(ctx context.Context, ex Execer) error {
	stmt := g.create
	if g.dialect.name == Postgres.name {
		stmt = fmt.Sprintf("DO $create$ BEGIN PERFORM pg_advisory_xact_lock(%d); %s; END $create$", int64(createLockKey), g.create)
	}
	if _, err := ex.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("sqlguard: create table %s: %w", g.table, err)
	}
	return nil
}

// createLockKey is the key of the advisory lock that CreateTable takes on
// PostgreSQL: concurrent CREATE TABLE IF NOT EXISTS of one table fails (a
// duplicate pg_type row) rather than wait.
const createLockKey = 0x66656e63696e6702 // "fencing" and 2

// Admit raises resource's fence to token with one statement in tx, or
// returns an error wrapping guard.ErrStaleToken when the fence is higher.
// The fence moves only if tx commits, with the caller's write; on
// ErrStaleToken nothing was written and tx should be rolled back.
//
// Token 0 and bad resource names get the errors of guard.CheckAdmit, and a
// token above math.MaxInt64 a *TokenRangeError; nothing is sent for them.
//
// Admit takes only a transaction: a fence moved outside the write's
// transaction would not move with it. Takeover is the admit with no write.
func (g *Guard) Admit(ctx context.Context, tx *sql.Tx, resource string, token uint64) error {
	return g.admit(ctx, tx, resource, token)
}

// Takeover raises resource's fence to token on db, in a statement that is a
// transaction of its own and writes nothing else: a new holder fences the
// previous one out before its first write (see "Fence at takeover" in
// package guard). Its errors are Admit's. To write, use Admit in the
// write's transaction, or Write.
func (g *Guard) Takeover(ctx context.Context, db *sql.DB, resource string, token uint64) error {
	return g.retryDeadlock(ctx, func() error { return g.admit(ctx, db, resource, token) })
}

// queryExecer is what Admit and Takeover run on: a *sql.Tx or a *sql.DB.
type queryExecer interface {
	Execer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (g *Guard) admit(ctx context.Context, ex queryExecer, resource string, token uint64) error {
	if err := g.check(ctx, resource, token); err != nil {
		return err
	}
	res, err := ex.ExecContext(ctx, g.admitQL, []byte(resource), int64(token))
	if err != nil {
		return fmt.Errorf("sqlguard: admit: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlguard: admit: rows affected: %w", err)
	}
	if n == 0 && g.equalQL != "" {
		// The admit locked the row: the fence read now stays until the
		// transaction ends.
		var fence int64
		if err := ex.QueryRowContext(ctx, g.equalQL, []byte(resource)).Scan(&fence); err != nil {
			return fmt.Errorf("sqlguard: admit: read the fence: %w", err)
		}
		if fence == int64(token) {
			return nil
		}
	}
	if n == 0 {
		return g.opts.Metrics.Observe(ctx, g.stale(ctx, ex, resource, token))
	}
	return nil
}

func (g *Guard) check(ctx context.Context, resource string, token uint64) error {
	if err := guard.CheckAdmit(resource, token); err != nil {
		return err
	}
	if token > math.MaxInt64 {
		return &TokenRangeError{Token: token}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return g.opts.Mint.Check(ctx, resource, token)
}

// stale returns the error for a refused token, naming the fence when it
// can read it.
func (g *Guard) stale(ctx context.Context, ex queryExecer, resource string, token uint64) error {
	var fence int64
	if err := ex.QueryRowContext(ctx, g.fenceQL, []byte(resource)).Scan(&fence); err == nil && fence > 0 {
		return guard.StaleError(resource, token, uint64(fence))
	}
	return fmt.Errorf("%w: token %d is below the fence of resource %s", guard.ErrStaleToken, token, backend.QuoteKey(resource))
}

// Write runs write in a new transaction on db after admitting token for
// resource in it, and commits if write returns nil; otherwise, or when the
// token is stale, it rolls back, so the fence and the write move together.
// opts are the transaction's options (nil for the driver's default). A nil write
// is a Takeover in a transaction of its own. The error of write, of Admit or of the commit
// is returned.
//
// On MySQL, a transaction that InnoDB rolled back as a deadlock's victim
// (error 1213: concurrent first writes of a resource, whose rows do not
// exist yet, take gap locks) is run again, write with it, as MySQL asks of
// its callers; so is Takeover's statement.
func (g *Guard) Write(ctx context.Context, db *sql.DB, opts *sql.TxOptions, resource string, token uint64, write func(*sql.Tx) error) error {
	if err := g.check(ctx, resource, token); err != nil {
		return err
	}
	return g.retryDeadlock(ctx, func() error { return g.write(ctx, db, opts, resource, token, write) })
}

// deadlockRetries bounds the runs of retryDeadlock.
const deadlockRetries = 20

// retryDeadlock runs fn again while it fails with MySQL's deadlock error.
func (g *Guard) retryDeadlock(ctx context.Context, fn func() error) error {
	for i := 0; ; i++ {
		err := fn()
		var me *mysql.MySQLError
		if g.dialect.name != MySQL.name || !errors.As(err, &me) || me.Number != 1213 || i == deadlockRetries || ctx.Err() != nil {
			return err
		}
	}
}

func (g *Guard) write(ctx context.Context, db *sql.DB, opts *sql.TxOptions, resource string, token uint64, write func(*sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("sqlguard: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := g.Admit(ctx, tx, resource, token); err != nil {
		return err
	}
	if write != nil {
		if err := write(tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlguard: commit: %w", err)
	}
	return nil
}

// Drop deletes resource's fence in tx: the fence goes with the resource,
// in the transaction that deletes the resource's rows, and only if tx
// commits. Admit the deleter's token in tx first, as for any write, so
// that a holder fenced out cannot delete the resource:
//
//	g.Admit(ctx, tx, "orders/42", lease.Token) // ErrStaleToken: roll back
//	tx.ExecContext(ctx, `DELETE FROM orders WHERE id = 42`)
//	g.Drop(ctx, tx, "orders/42")
//	tx.Commit()
//
// Once the fence is gone, any token is admitted on resource again, an old
// holder's too: drop a fence only with a resource that no late write can
// bring back, and keep it when the name may be used again ("Dropping a
// fence" in docs/guards.md). Dropping a resource with no fence does
// nothing. A bad resource name gets the error of backend.CheckKey and
// nothing is sent.
func (g *Guard) Drop(ctx context.Context, tx *sql.Tx, resource string) error {
	if err := backend.CheckKey(resource); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, g.dropQL, []byte(resource)); err != nil {
		return fmt.Errorf("sqlguard: drop the fence of resource %s: %w", backend.QuoteKey(resource), err)
	}
	return nil
}

// Querier runs a query: a *sql.Tx, a *sql.DB or a *sql.Conn.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Fence returns resource's fence on q: the highest token admitted for it,
// or 0 if none was.
func (g *Guard) Fence(ctx context.Context, q Querier, resource string) (uint64, error) {
	if err := backend.CheckKey(resource); err != nil {
		return 0, err
	}
	var fence int64
	err := q.QueryRowContext(ctx, g.fenceQL, []byte(resource)).Scan(&fence)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("sqlguard: read the fence of resource %s: %w", backend.QuoteKey(resource), err)
	}
	return uint64(fence), nil
}

// LowerFence sets resource's fence to to on db if it is from, in one
// statement, and otherwise returns a *guard.FenceChangedError (wrapping
// guard.ErrFenceChanged) and changes nothing: the break-glass for a fence
// raised by a token that should never have been admitted (see
// docs/guards.md). to must be below from; 0 clears the fence.
//
// A lowered fence admits tokens it refused before: lower it only after
// every holder of the tokens between to and from has stopped.
func (g *Guard) LowerFence(ctx context.Context, db *sql.DB, resource string, from, to uint64) error {
	if err := guard.CheckLower(resource, from, to); err != nil {
		return err
	}
	if from > math.MaxInt64 {
		return &TokenRangeError{Token: from}
	}
	var res sql.Result
	var err error
	if to == 0 {
		res, err = db.ExecContext(ctx, g.clearQL, []byte(resource), int64(from))
	} else {
		res, err = db.ExecContext(ctx, g.lowerQL, int64(to), []byte(resource), int64(from))
	}
	if err != nil {
		return fmt.Errorf("sqlguard: lower the fence of resource %s: %w", backend.QuoteKey(resource), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlguard: lower the fence of resource %s: rows affected: %w", backend.QuoteKey(resource), err)
	}
	if n == 0 {
		fence, _ := g.Fence(ctx, db, resource)
		return &guard.FenceChangedError{Resource: resource, From: from, Fence: fence}
	}
	return nil
}
