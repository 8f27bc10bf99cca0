package recipetest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "modernc.org/sqlite"             // the "sqlite" driver

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// SQLite returns a world on a SQLite file of its own; each process opens
// the file with a pool of its own, as separate processes of one host do.
// Its waiters poll.
func SQLite(t *testing.T) World {
	path := filepath.Join(t.TempDir(), "recipes.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	SQLBackend(t, "sqlite", dsn, sqlbackend.SQLite, "", true) // the tables, once
	newBackend := func(t *testing.T) backend.Backend {
		return SQLBackend(t, "sqlite", dsn, sqlbackend.SQLite, "", false)
	}
	return World{Name: "sqlite", TTL: time.Second, Margin: 500 * time.Millisecond, ObserveLag: 600 * time.Millisecond, NewBackend: newBackend}
}

// Postgres returns a world on a PostgreSQL child process of its own
// (internal/pgtest: a skip without PostgreSQL, a failure in CI); each
// process has a pool and a LISTEN connection of its own.
func Postgres(t *testing.T) World {
	s := pgtest.Start(t)
	prefix := fmt.Sprintf("recipe%d_", prefixes.Add(1))
	// The recipes' tests need no durability: the server runs with fsync off.
	SQLBackend(t, "pgx", s.DSN(), sqlbackend.Postgres, prefix, true, sqlbackend.WithoutSafetyChecks()) // the tables and functions, once
	newBackend := func(t *testing.T) backend.Backend {
		return SQLBackend(t, "pgx", s.DSN(), sqlbackend.Postgres, prefix, false, sqlbackend.WithoutSafetyChecks(), sqlbackend.WithListener(s.DSN()))
	}
	return World{Name: "postgres", TTL: time.Second, Margin: 500 * time.Millisecond, Prefix: prefix, NewBackend: newBackend}
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
	b, err := sqlbackend.New(db, dialect, opts...)
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
