package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// MaxToken is the largest token this backend mints: SQL integers are signed
// 64-bit.
const MaxToken = math.MaxInt64

// The optional capabilities of package backend, all implemented on both
// dialects (see notify.go for how each one learns of a release).
var (
	_ backend.Notifier      = (*Backend)(nil)
	_ backend.Inspector     = (*Backend)(nil)
	_ backend.ForceReleaser = (*Backend)(nil)
	_ backend.Lister        = (*Backend)(nil)
	_ backend.Queuer        = (*Backend)(nil)
	_ backend.Sizer         = (*Backend)(nil)
)

// Dialect is the SQL spoken by one kind of database.
type Dialect struct{ name string }

// Dialects.
var (
	// Postgres is PostgreSQL 12 or later, with any database/sql driver
	// (pgx's stdlib adapter, lib/pq).
	Postgres = Dialect{"postgres"}
	// SQLite is SQLite 3.24 or later with any database/sql driver
	// (modernc.org/sqlite, mattn/go-sqlite3), on a file that the processes
	// of one host share.
	SQLite = Dialect{"sqlite"}
	// MySQL is MySQL 8.0 or later, or MariaDB 10.6 or later, with InnoDB
	// tables and github.com/go-sql-driver/mysql (add interpolateParams=true
	// to the DSN: one round trip per statement, not two).
	MySQL = Dialect{"mysql"}
)

// String returns the dialect's name: "postgres", "sqlite" or "mysql".
func (d Dialect) String() string { return d.name }

// errInvalidConfig is wrapped by New's errors about its arguments (a nil
// database, a zero Dialect, a bad table prefix), and AdmitTx's.
var errInvalidConfig = fmt.Errorf("sqlbackend: %w", backend.ErrInvalidConfig)

// ErrNoTables is wrapped by the error of an operation on a database that has
// no tables for the backend's prefix yet: run CreateTables (or DDL in a
// migration) first.
var ErrNoTables = errors.New("sqlbackend: tables missing (run CreateTables or the statements of DDL)")

// ErrOldSchema is wrapped by the error of an operation on tables that an
// earlier release of this package created, which lack what the operation
// needs (the columns of lock delay, the waiters table): run CreateTables
// (or the statements of DDL) to bring them up to date. The error names
// what is missing.
var ErrOldSchema = errors.New("sqlbackend: tables of an earlier release (run CreateTables or the statements of DDL to bring them up to date)")

// Backend is a fencing backend on a PostgreSQL or SQLite database. It is
// safe for concurrent use. The zero value is not usable; call New.
type Backend struct {
	db        *sql.DB
	dialect   dialect
	prefix    string
	sql       statements
	clock     HostClock
	check     backend.CheckMode
	logger    *slog.Logger
	listenDSN string
	closed    atomic.Bool
	notPgx    atomic.Bool // the pool's driver is not pgx's stdlib (pgQueryRow)
	hub       hub
	writer    chan struct{} // SQLite: held by the transaction that runs (sqlite.tx)
	retention time.Duration // 0: rows are kept for ever
	sweep     sweeper
}

// Option configures a Backend.
type Option func(*Backend)

// WithTablePrefix sets the prefix of the backend's table and functions
// (default DefaultPrefix): an unquoted identifier, optionally
// schema-qualified ("app.fencing_"). Backends with different prefixes have
// independent key spaces in one database.
func WithTablePrefix(prefix string) Option { return func(b *Backend) { b.prefix = prefix } }

// WithHostClock makes a SQLite backend read c instead of SystemClock, for
// tests. Every process sharing a database file must use the same clock.
// It has no effect on PostgreSQL, whose server clock decides.
func WithHostClock(c HostClock) Option { return func(b *Backend) { b.clock = c } }

// WithSafetyCheck sets what New does about a database that can lose or
// roll back committed tokens (see SafetyError), or that it cannot reach
// (default backend.CheckRefuse; see backend's "Constructors and the safety
// check"). backend.CheckSkip is for tests on throw-away servers only.
func WithSafetyCheck(mode backend.CheckMode) Option { return func(b *Backend) { b.check = mode } }

// WithLogger sets where New logs a failed safety check under
// backend.CheckWarn (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(b *Backend) { b.logger = l } }

// WithListener gives a PostgreSQL backend a connection string for the one
// session it opens to LISTEN for releases and for leaves of a line, so
// that NotifyFree and NotifyTurn wake waiters at once. It must reach the
// server directly (a session, not a pooler in transaction mode): New
// opens it once, LISTENs and sends a NOTIFY through db, and refuses a
// session that hears nothing within ten seconds (or before New's context
// ends) with ErrNoNotifications. Without it both poll, every 100 ms, in one statement
// per Backend (see the package documentation). The session is opened for
// the first subscription and closed a second after the last one, so that
// consecutive Locks share it, or by Close.
func WithListener(connString string) Option { return func(b *Backend) { b.listenDSN = connString } }

// New returns a backend over db, which stays the caller's: Close never
// closes it, in the shape every backend shares (see backend's
// "Constructors and the safety check"). On PostgreSQL db may reach the
// server through PgBouncer in transaction pooling mode (see the package
// documentation). ctx bounds the round trips New makes.
//
// New checks that the database keeps what it commits (see SafetyError),
// as WithSafetyCheck says. Its errors wrap backend.ErrInvalidConfig for
// its arguments (and, naming the fix, when pgx's cached prepared
// statements clash through PgBouncer), and on PostgreSQL
// backend.ErrAuthRefused, backend.ErrUnreachable or
// backend.ErrPermissionDenied when the server refused the login, could not
// be reached or refused the role. It does not create the tables: call
// CreateTables, from every replica if you like, or run DDL in a migration.
func New(ctx context.Context, db *sql.DB, dialect Dialect, opts ...Option) (*Backend, error) {
	b := &Backend{db: db, prefix: DefaultPrefix, writer: make(chan struct{}, 1), retention: DefaultRetention}
	b.hub.b = b
	for _, o := range opts {
		o(b)
	}
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", errInvalidConfig)
	}
	newDialect := dialects[dialect]
	if newDialect == nil {
		return nil, fmt.Errorf("%w: no dialect (use sqlbackend.Postgres, sqlbackend.SQLite or sqlbackend.MySQL)", errInvalidConfig)
	}
	if !prefixPattern.MatchString(b.prefix) {
		return nil, fmt.Errorf("%w: table prefix %q is not an unquoted identifier, optionally schema-qualified", errInvalidConfig, b.prefix)
	}
	if err := b.check.Validate(); err != nil {
		return nil, fmt.Errorf("sqlbackend: %w", err)
	}
	var err error
	if b.dialect, err = newDialect(b); err != nil {
		return nil, err
	}
	if b.logger == nil {
		b.logger = slog.Default()
	}
	if b.check != backend.CheckSkip {
		if err := b.dialect.checkSafety(ctx); err != nil {
			if b.check == backend.CheckRefuse || errors.Is(err, backend.ErrAuthRefused) || errors.Is(err, backend.ErrPermissionDenied) {
				return nil, err
			}
			b.logger.Warn("sqlbackend: safety check failed; going on (CheckWarn)", "error", err)
		}
	}
	if b.listenDSN != "" {
		ctx, cancel := context.WithTimeout(ctx, listenCheckWait)
		defer cancel()
		if err := b.checkListener(ctx); err != nil {
			return nil, err
		}
	}
	b.startSweep()
	return b, nil
}

// CreateTables creates the backend's tables (and on PostgreSQL its
// functions) if they do not exist, and brings the tables of an earlier
// release up to date: the statements of DDL, in order, in one transaction
// (on SQLite skipping the columns a table has already). Any number of
// processes may call it at once, as the replicas of a deployment do when
// they start together: on PostgreSQL the transaction first takes a
// transaction-scoped advisory lock (createLockKey), so the calls run one
// after the other (PgBouncer's transaction pooling keeps it); on SQLite
// the write lock of BEGIN IMMEDIATE orders them; on MySQL the tables'
// metadata locks. Each finds the work of the one before it done.
func (b *Backend) CreateTables(ctx context.Context) error {
	if err := b.ready(ctx, nil); err != nil {
		return err
	}
	return b.dialect.createTables(ctx)
}

// Close implements backend.Backend: it ends the listener session and every
// subscription, and never closes db. Later calls return backend.ErrClosed.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.hub.close()
	b.stopSweep()
	return nil
}

// ready opens every operation: it returns ctx's error, then
// backend.ErrClosed after Close, then args: the error of the operation's
// argument check, a backend.Check function called on the operation's
// arguments (nil for an operation with none to check). The backends are
// the one layer that checks arguments (the Coordinator and the conformance
// suite rely on it), and this is where each operation does; a call refused
// here sends and changes nothing.
func (b *Backend) ready(ctx context.Context, args error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return args
}
