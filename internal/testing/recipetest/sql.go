package recipetest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "modernc.org/sqlite"             // the "sqlite" driver

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// SQLite returns a world on a SQLite file of its own; each process opens
// the file with a pool of its own, as separate processes of one host do.
// Its waiters poll.
func SQLite(t *testing.T) World {
	path := filepath.Join(t.TempDir(), "recipes.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	b := SQLBackend(t, "sqlite", dsn, sqlbackend.SQLite, "", true) // the tables, once
	newBackend := func(t *testing.T) backend.Backend {
		return SQLBackend(t, "sqlite", dsn, sqlbackend.SQLite, "", false)
	}
	ttl := shortTTL(t, b, time.Second)
	return World{Name: "sqlite", TTL: ttl, Margin: ttl / 2, NewBackend: newBackend}
}

// Postgres returns a world on a PostgreSQL child process of its own
// (internal/testing/pgtest: a skip without PostgreSQL, a failure in CI); each
// process has a pool and a LISTEN connection of its own.
func Postgres(t *testing.T) World {
	s := pgtest.Start(t)
	prefix := fmt.Sprintf("recipe%d_", prefixes.Add(1))
	// The recipes' tests need no durability: the server runs with fsync off.
	b := SQLBackend(t, "pgx", s.DSN(), sqlbackend.Postgres, prefix, true, sqlbackend.WithSafetyCheck(backend.CheckSkip)) // the tables and functions, once
	newBackend := func(t *testing.T) backend.Backend {
		return SQLBackend(t, "pgx", s.DSN(), sqlbackend.Postgres, prefix, false, sqlbackend.WithSafetyCheck(backend.CheckSkip), sqlbackend.WithListener(s.DSN()))
	}
	ttl := shortTTL(t, b, time.Second)
	return World{Name: "postgres", TTL: ttl, Margin: ttl / 2, Prefix: prefix, DSN: s.DSN(), NewBackend: newBackend}
}

// MySQL returns a world on a MariaDB child process of its own
// (internal/testing/mysqltest: a skip without MariaDB, a failure in CI);
// each process has a pool of its own. Its waiters poll.
func MySQL(t *testing.T) World {
	s := mysqltest.Start(t)
	prefix := fmt.Sprintf("recipe%d_", prefixes.Add(1))
	b := SQLBackend(t, "mysql", s.DSN(), sqlbackend.MySQL, prefix, true) // the tables, once
	newBackend := func(t *testing.T) backend.Backend {
		return SQLBackend(t, "mysql", s.DSN(), sqlbackend.MySQL, prefix, false)
	}
	ttl := shortTTL(t, b, time.Second)
	return World{Name: "mysql", TTL: ttl, Margin: ttl / 2, Prefix: prefix, DSN: s.DSN(), NewBackend: newBackend}
}

// SQLBackend opens dsn with driver and returns a backend on it, first
// creating its tables when create is set (once per store: CreateTables is
// not for processes racing each other); both are closed when t ends.
func SQLBackend(t testing.TB, driver, dsn string, dialect sqlbackend.Dialect, prefix string, create bool, opts ...sqlbackend.Option) backend.Backend {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if prefix != "" {
		opts = append(opts, sqlbackend.WithTablePrefix(prefix))
	}
	b, err := sqlbackend.New(context.Background(), db, dialect, opts...)
	if err == nil && create {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = b.CreateTables(ctx)
		cancel()
	}
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); db.Close() })
	return b
}

// roundTripFactor is how many observed store round trips a short lease on
// a real server lasts: a renewer needs one per renewal, and a loaded host
// (or -race) delays its timers about as much as it delays the store.
const roundTripFactor = 50

// shortTTL returns a short lease's TTL on b's store: roundTripFactor times
// the median round trip of a few grants and releases observed now, and at
// least floor. Tests that are not about expiry then hold on a loaded host.
func shortTTL(t testing.TB, b backend.Backend, floor time.Duration) time.Duration {
	t.Helper()
	c := fencing.New(b)
	ctx := context.Background()
	var took []time.Duration
	for range 4 {
		start := time.Now()
		l, err := c.Grant(ctx, "recipetest-round-trip", time.Minute)
		took = append(took, time.Since(start))
		if err != nil {
			t.Fatalf("Grant (measuring the round trip): %v", err)
		}
		start = time.Now()
		if err := c.Release(ctx, "recipetest-round-trip", l.ID); err != nil {
			t.Fatalf("Release (measuring the round trip): %v", err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	ttl := max(floor, roundTripFactor*took[len(took)/2])
	t.Logf("store round trip %v: short TTL %v", took[len(took)/2], ttl)
	return ttl
}
