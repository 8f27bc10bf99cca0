package sqlbackend_test

import (
	"testing"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
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
