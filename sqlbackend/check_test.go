package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

func wantSafety(t *testing.T, what string, err error, setting string) {
	t.Helper()
	var se *sqlbackend.SafetyError
	if !errors.As(err, &se) || se.Setting != setting || !errors.Is(err, backend.ErrUnsafeStore) || se.Fix == "" {
		t.Fatalf("%s: New returned %v, want a *SafetyError for %s with a fix", what, err, setting)
	}
}

func TestSQLiteSafetyChecks(t *testing.T) {
	dir := t.TempDir()
	open := func(name, params string) *sql.DB {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, name)+"?_pragma=busy_timeout(1000)"+params)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	for _, c := range []struct{ name, params, setting string }{
		{"memjournal.db", "&_pragma=journal_mode(MEMORY)", "journal_mode"},
		{"nojournal.db", "&_pragma=journal_mode(OFF)", "journal_mode"},
		{"normal.db", "&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)", "synchronous"},
		{"off.db", "&_pragma=synchronous(OFF)", "synchronous"},
	} {
		db := open(c.name, c.params)
		_, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
		wantSafety(t, c.params, err, c.setting)
		if _, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite, sqlbackend.WithSafetyCheck(backend.CheckSkip)); err != nil {
			t.Fatalf("%s with CheckSkip: %v", c.params, err)
		}
	}
	for _, params := range []string{"&_pragma=journal_mode(WAL)", "&_pragma=journal_mode(DELETE)&_pragma=synchronous(EXTRA)"} {
		if _, err := sqlbackend.New(context.Background(), open("ok"+params[len(params)-5:], params), sqlbackend.SQLite); err != nil {
			t.Fatalf("%s: %v, want a safe database", params, err)
		}
	}
	// A read-only connection cannot take the write lock.
	rw := open("ro.db", "&_pragma=journal_mode(WAL)")
	if _, err := rw.Exec("CREATE TABLE x (a)"); err != nil {
		t.Fatal(err)
	}
	_, err := sqlbackend.New(context.Background(), open("ro.db", "&mode=ro"), sqlbackend.SQLite)
	wantSafety(t, "mode=ro", err, "write access")
	// A file that is not SQLite.
	junk := filepath.Join(dir, "junk.db")
	os.WriteFile(junk, []byte(strings.Repeat("not a database ", 100)), 0o600)
	if _, err := sqlbackend.New(context.Background(), open("junk.db", ""), sqlbackend.SQLite); err == nil || !strings.Contains(err.Error(), "SQLite") {
		t.Fatalf("New on a file that is not SQLite: %v, want an error saying so", err)
	}
}

func TestPostgresSafetyChecks(t *testing.T) {
	// pgtest's fast server runs with fsync off.
	fast := pgtest.Start(t)
	_, err := sqlbackend.New(context.Background(), fast.DB(t), sqlbackend.Postgres)
	wantSafety(t, "fsync=off", err, "fsync")

	srv := pgtest.StartConfig(t, pgtest.Config{Durable: true})
	admin := srv.DB(t)
	ctx := context.Background()
	if _, err := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.Postgres); err != nil {
		t.Fatalf("New on a durable server: %v", err)
	}
	for _, c := range []struct{ set, reset, setting string }{
		{"ALTER ROLE postgres SET synchronous_commit = off", "ALTER ROLE postgres RESET synchronous_commit", "synchronous_commit"},
		{"ALTER ROLE postgres SET default_transaction_read_only = on", "ALTER ROLE postgres RESET default_transaction_read_only", "transaction_read_only"},
	} {
		if _, err := admin.ExecContext(ctx, c.set); err != nil {
			t.Fatal(err)
		}
		_, err := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.Postgres) // a new pool: new sessions
		wantSafety(t, c.set, err, c.setting)
		if _, err := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip)); err != nil {
			t.Fatalf("%s with CheckSkip: %v", c.set, err)
		}
		if _, err := srv.DB(t).ExecContext(ctx, "BEGIN READ WRITE; "+c.reset+"; COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	// A database that is not PostgreSQL.
	if _, err := sqlbackend.New(context.Background(), openSQLite(t), sqlbackend.Postgres); err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("New(Postgres) on SQLite: %v, want an error asking whether it is PostgreSQL", err)
	}
}

func TestBadConfig(t *testing.T) {
	db := openSQLite(t)
	for _, c := range []struct {
		name string
		db   *sql.DB
		d    sqlbackend.Dialect
		opts []sqlbackend.Option
	}{
		{"nil db", nil, sqlbackend.SQLite, nil},
		{"zero dialect", db, sqlbackend.Dialect{}, nil},
		{"bad prefix", db, sqlbackend.SQLite, []sqlbackend.Option{sqlbackend.WithTablePrefix("x; DROP TABLE y")}},
		{"quoted prefix", db, sqlbackend.SQLite, []sqlbackend.Option{sqlbackend.WithTablePrefix(`"x"`)}},
		{"listener on SQLite", db, sqlbackend.SQLite, []sqlbackend.Option{sqlbackend.WithListener("postgres://x")}},
	} {
		if _, err := sqlbackend.New(context.Background(), c.db, c.d, c.opts...); !errors.Is(err, backend.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", c.name, err)
		}
	}
	if _, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite, sqlbackend.WithTablePrefix("main.app_")); err != nil {
		t.Errorf("schema-qualified prefix: %v", err)
	}
}

// Before CreateTables every operation names it.
func TestMissingTables(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		b, err := sqlbackend.New(context.Background(), h.db, h.dialect, append(h.opts, sqlbackend.WithTablePrefix("never_created_"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ctx := context.Background()
		_, err = b.Grant(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: 1e9})
		if !errors.Is(err, sqlbackend.ErrNoTables) || !strings.Contains(err.Error(), "CreateTables") || errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("Grant without tables: %v, want ErrNoTables naming CreateTables", err)
		}
		if _, _, err := b.Token(ctx, "k"); !errors.Is(err, sqlbackend.ErrNoTables) {
			t.Fatalf("Token without tables: %v, want ErrNoTables", err)
		}
		if _, err := b.Enqueue(ctx, "k", "w", time.Minute); !errors.Is(err, sqlbackend.ErrNoTables) || errors.Is(err, sqlbackend.ErrOldSchema) {
			t.Fatalf("Enqueue without tables: %v, want ErrNoTables", err)
		}
	})
}

// A schema-qualified prefix names every table, index and function the
// backend makes: CreateTables (twice) and the lease and line operations
// work with one. (SQLite puts an index's schema on its name, not on its
// table's.)
func TestSchemaQualifiedPrefix(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		prefix := "main.app_"
		if h.dialect == sqlbackend.Postgres {
			prefix = "public.app_"
		}
		b, err := sqlbackend.New(context.Background(), h.db, h.dialect, append(h.opts, sqlbackend.WithTablePrefix(prefix))...)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ctx := context.Background()
		for i := range 2 {
			if err := b.CreateTables(ctx); err != nil {
				t.Fatalf("CreateTables #%d: %v", i+1, err)
			}
		}
		if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute, LockDelay: time.Second}); err != nil {
			t.Fatal(err)
		}
		if p, err := b.Enqueue(ctx, "k", "w", time.Minute); err != nil || p.Ahead != 0 {
			t.Fatalf("Enqueue: %+v, %v", p, err)
		}
		if err := b.Dequeue(ctx, "k", "w"); err != nil {
			t.Fatal(err)
		}
	})
}
