package sqlbackend_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// No goroutine of a subscription, Hold or Lock outlives its test. Run
// with SQLBACKEND_TEST_CHILD set, the test binary is a child process of
// TestSQLiteProcesses.
func TestMain(m *testing.M) {
	if role, path, ok := strings.Cut(os.Getenv(childEnv), ":"); ok {
		runChild(role, path)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

var sqlOpen = sql.Open

func sqlOpenPgx(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }

// sqliteDSN is how the tests open a database file: WAL, a busy timeout,
// synchronous FULL.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
}

// openSQLite opens a new database file in t's temporary directory.
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	return openSQLitePath(t, filepath.Join(t.TempDir(), "fencing.db"))
}

func openSQLitePath(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// fakeClock is a HostClock moved by hand.
type fakeClock struct {
	mu    sync.Mutex
	boot  string
	since time.Duration
	wall  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{boot: "boot-1", since: time.Hour, wall: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() (string, time.Duration, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boot, c.since, c.wall
}

// Advance lets d pass on both clocks.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since += d
	c.wall = c.wall.Add(d)
}

// StepWall moves only the wall clock, as an operator or NTP would.
func (c *fakeClock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// Reboot starts a new boot whose clock begins near zero.
func (c *fakeClock) Reboot() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.boot += "'"
	c.since = time.Second
}

func (c *fakeClock) wallNow() time.Time {
	_, _, w := c.Now()
	return w
}

// harness makes backends on one database, each with a table prefix of its
// own.
type harness struct {
	db      *sql.DB
	dialect sqlbackend.Dialect
	clock   *fakeClock // SQLite only; nil: the system clock
	opts    []sqlbackend.Option
	n       atomic.Int64
	spaces  sync.Map // backend.Backend → its table prefix, for Reopen
}

func (h *harness) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	return h.newBackend(ctx, h.opts...)
}

// NewBackendWithRetention implements conformance.Retainer.
func (h *harness) NewBackendWithRetention(ctx context.Context, _ testing.TB, d time.Duration) (backend.Backend, error) {
	return h.newBackend(ctx, append(h.opts[:len(h.opts):len(h.opts)], sqlbackend.WithRetention(d))...)
}

// Records implements conformance.Retainer.
func (h *harness) Records(ctx context.Context, b backend.Backend) (int, error) {
	st, err := b.(backend.Sizer).Size(ctx)
	return int(st.Records), err
}

// Reopen implements conformance.Reopener: a backend on b's tables, over
// the harness's pool.
func (h *harness) Reopen(ctx context.Context, _ testing.TB, b backend.Backend) (backend.Backend, error) {
	prefix, ok := h.spaces.Load(b)
	if !ok {
		return nil, fmt.Errorf("Reopen: a backend NewBackend did not make")
	}
	return h.newBackendOn(ctx, prefix.(string), h.opts...)
}

func (h *harness) newBackend(ctx context.Context, extra ...sqlbackend.Option) (backend.Backend, error) {
	prefix := fmt.Sprintf("t%d_", h.n.Add(1))
	b, err := h.newBackendOn(ctx, prefix, extra...)
	if err == nil {
		h.spaces.Store(b, prefix)
	}
	return b, err
}

func (h *harness) newBackendOn(ctx context.Context, prefix string, extra ...sqlbackend.Option) (backend.Backend, error) {
	opts := append([]sqlbackend.Option{sqlbackend.WithTablePrefix(prefix)}, extra...)
	if h.clock != nil {
		opts = append(opts, sqlbackend.WithHostClock(h.clock))
	}
	b, err := sqlbackend.New(context.Background(), h.db, h.dialect, opts...)
	if err != nil {
		return nil, err
	}
	if err := b.CreateTables(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func (h *harness) Wait(ctx context.Context, d time.Duration) error {
	if h.clock != nil {
		h.clock.Advance(d)
		return nil
	}
	return conformance.Sleep(ctx, d)
}

func (h *harness) Traits() conformance.Traits {
	if h.clock != nil {
		return conformance.Traits{Now: h.clock.wallNow, DenseTokens: true, MaxToken: sqlbackend.MaxToken}
	}
	return conformance.Traits{
		// Leases long enough that a busy machine still sees them live
		// right after a grant; the coordinator's clock is read in the
		// statement, to the microsecond.
		MinTTL: 400 * time.Millisecond,
		Slack:  10 * time.Millisecond,
		// A PostgreSQL token carries the epoch in its high bits: the
		// first token on a key is epoch<<EpochShift | 1, not 1.
		DenseTokens: h.dialect != sqlbackend.Postgres,
		MaxToken:    sqlbackend.MaxToken,
	}
}

// PresetToken implements conformance.TokenPresetter: it writes key's row
// with token as its counter and a released lease.
func (h *harness) PresetToken(ctx context.Context, b backend.Backend, key string, token uint64) error {
	table := b.(*sqlbackend.Backend).Table()
	q := fmt.Sprintf(`INSERT INTO %s (key, token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns) VALUES (?, ?, 'preset', 1, '', 0, 0, 0)`, table)
	switch h.dialect {
	case sqlbackend.Postgres:
		q = fmt.Sprintf(`INSERT INTO %s (key, token, lease_id, released, expires_at, ttl_ns, margin_ns) VALUES ($1, $2, 'preset', true, '-infinity', 0, 0)`, table)
	case sqlbackend.MySQL:
		q = fmt.Sprintf("INSERT INTO %s (`key`, token, lease_id, released, expires_at, ttl_ns, margin_ns) VALUES (?, ?, 'preset', 1, 0, 0, 0)", table)
	}
	_, err := h.db.ExecContext(ctx, q, []byte(key), int64(token))
	return err
}

// newPostgres starts a PostgreSQL server for the test (skipped without
// one, failed in CI) and returns a harness on it. The test server runs
// with fsync off, which the safety check would refuse.
func newPostgres(t testing.TB) (*pgtest.Server, *harness) {
	srv := pgtest.Start(t)
	return srv, &harness{db: srv.DB(t), dialect: sqlbackend.Postgres, opts: []sqlbackend.Option{sqlbackend.WithSafetyCheck(backend.CheckSkip)}}
}

// newMySQL starts a MariaDB server for the test (skipped without one,
// failed in CI) and returns a harness on it, with the safety checks on:
// the test server keeps MariaDB's settings (only its file syncs are off).
func newMySQL(t testing.TB) (*mysqltest.Server, *harness) {
	srv := mysqltest.Start(t)
	return srv, &harness{db: srv.DB(t), dialect: sqlbackend.MySQL}
}

// openMySQL opens dsn with go-sql-driver/mysql and closes it when t ends.
func openMySQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
