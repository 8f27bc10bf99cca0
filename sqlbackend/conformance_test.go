package sqlbackend_test

import (
	"context"
	"testing"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/contentiontest"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestSQLiteConformance runs the suite on a database file with a fake host
// clock: exact to the nanosecond and instant.
func TestSQLiteConformance(t *testing.T) {
	conformance.Run(t, &harness{db: openSQLite(t), dialect: sqlbackend.SQLite, clock: newFakeClock()})
}

// TestSQLiteConformanceSystemClock runs it on the host's real clock, with
// the cases in parallel on one file.
func TestSQLiteConformanceSystemClock(t *testing.T) {
	conformance.Run(t, &harness{db: openSQLite(t), dialect: sqlbackend.SQLite})
}

func TestPostgresConformance(t *testing.T) {
	_, h := newPostgres(t)
	conformance.Run(t, h)
}

func TestPostgresConformanceListener(t *testing.T) {
	srv, h := newPostgres(t)
	h.opts = append(h.opts, sqlbackend.WithListener(srv.DSN()))
	conformance.Run(t, h)
}

// TestPgBouncerConformance runs the suite through PgBouncer in transaction
// pooling mode, with fewer server connections than the suite's clients:
// consecutive statements of one client land on different sessions.
func TestPgBouncerConformance(t *testing.T) {
	srv := pgtest.Start(t)
	bouncer := pgtest.StartBouncer(t, srv, 4)
	h := &harness{db: bouncer.DB(t), dialect: sqlbackend.Postgres, opts: []sqlbackend.Option{sqlbackend.WithSafetyCheck(backend.CheckSkip)}}
	conformance.Run(t, h)
}

func TestMySQLConformance(t *testing.T) {
	_, h := newMySQL(t)
	conformance.Run(t, h)
}

// TestContention checks the spans and contention metrics of a contention
// on each database (see contentiontest.Run).
func TestContention(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		contentiontest.Run(t, &harness{db: openSQLite(t), dialect: sqlbackend.SQLite})
	})
	t.Run("Postgres", func(t *testing.T) {
		_, h := newPostgres(t)
		contentiontest.Run(t, h)
	})
	t.Run("MySQL", func(t *testing.T) {
		_, h := newMySQL(t)
		contentiontest.Run(t, h)
	})
}

// TestMySQLRestart: mariadbd, syncing every commit, is killed (SIGKILL)
// and started again on its data.
func TestMySQLRestart(t *testing.T) {
	srv := mysqltest.StartConfig(t, mysqltest.Config{Durable: true})
	h := &harness{db: srv.DB(t), dialect: sqlbackend.MySQL}
	conformance.RunRestart(t, &mysqlRestarter{srv: srv, h: h})
}

// TestRestartWait: waiters wait through a crash and restart of the server
// (conformance.RunRestartWait), on PostgreSQL (SIGQUIT, as pg_ctl stop -m
// immediate) and MariaDB (SIGKILL).
func TestRestartWait(t *testing.T) {
	t.Run("PostgreSQL", func(t *testing.T) {
		srv := pgtest.StartConfig(t, pgtest.Config{Durable: true})
		h := &harness{db: srv.DB(t), dialect: sqlbackend.Postgres}
		conformance.RunRestartWait(t, &pgRestarter{srv: srv, h: h})
	})
	t.Run("MySQL", func(t *testing.T) {
		srv := mysqltest.StartConfig(t, mysqltest.Config{Durable: true})
		h := &harness{db: srv.DB(t), dialect: sqlbackend.MySQL}
		conformance.RunRestartWait(t, &mysqlRestarter{srv: srv, h: h})
	})
}

// pgRestarter is a conformance.Restarter on a PostgreSQL server of the
// test: one pool, which reconnects after the restart (same port).
type pgRestarter struct {
	srv *pgtest.Server
	h   *harness
}

func (r *pgRestarter) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	b, err := sqlbackend.New(context.Background(), r.h.db, sqlbackend.Postgres, sqlbackend.WithTablePrefix("restart_"))
	if err != nil {
		return nil, err
	}
	return b, b.CreateTables(ctx)
}

func (r *pgRestarter) Kill(testing.TB)            { r.srv.Crash() }
func (r *pgRestarter) Start(t testing.TB)         { r.srv.Restart(t) }
func (r *pgRestarter) Traits() conformance.Traits { return r.h.Traits() }

// mysqlRestarter is a conformance.Restarter on a MariaDB server of the
// test: one pool, which reconnects after the restart (same port).
type mysqlRestarter struct {
	srv *mysqltest.Server
	h   *harness
}

func (r *mysqlRestarter) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	b, err := sqlbackend.New(context.Background(), r.h.db, sqlbackend.MySQL, sqlbackend.WithTablePrefix("restart_"))
	if err != nil {
		return nil, err
	}
	return b, b.CreateTables(ctx)
}

func (r *mysqlRestarter) Kill(testing.TB)            { r.srv.Crash() }
func (r *mysqlRestarter) Start(t testing.TB)         { r.srv.Restart(t) }
func (r *mysqlRestarter) Traits() conformance.Traits { return r.h.Traits() }

// BenchmarkConformance runs the suite's benchmarks on SQLite (the host's
// clock) and PostgreSQL.
func BenchmarkConformance(b *testing.B) {
	b.Run("SQLite", func(b *testing.B) {
		conformance.RunBenchmarks(b, &harness{db: openSQLite(b), dialect: sqlbackend.SQLite})
	})
	b.Run("Postgres", func(b *testing.B) {
		_, h := newPostgres(b)
		conformance.RunBenchmarks(b, h)
	})
}
