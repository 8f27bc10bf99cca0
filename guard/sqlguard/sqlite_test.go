package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	_ "modernc.org/sqlite"
)

// openSQLite opens a SQLite database file in a temporary directory, in WAL
// mode, with a busy timeout and IMMEDIATE transactions, as the package
// documentation advises for concurrent writers.
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guard.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// One connection creates the file and turns WAL on before any test's
	// connections race to: a fresh file's first switch to WAL can refuse
	// another connection at once (SQLITE_BUSY without the busy timeout).
	if _, err := db.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestSQLiteConformance(t *testing.T) {
	conformance.RunGuard(t, &sqlHarness{db: openSQLite(t), dialect: sqlguard.SQLite})
}

func TestTokenRange(t *testing.T) {
	db := openSQLite(t)
	g, err := sqlguard.New(sqlguard.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := g.Takeover(ctx, db, "r", math.MaxInt64); err != nil {
		t.Fatalf("Admit(MaxInt64): %v", err)
	}
	for _, tok := range []uint64{math.MaxInt64 + 1, math.MaxUint64} {
		err := g.Takeover(ctx, db, "r", tok)
		var rangeErr *sqlguard.TokenRangeError
		if !errors.As(err, &rangeErr) || rangeErr.Token != tok || !errors.Is(err, guard.ErrInvalidToken) {
			t.Errorf("Admit(%d): got %v, want a *TokenRangeError for it wrapping ErrInvalidToken", tok, err)
		}
	}
	// Neither was stored as a negative number below MaxInt64.
	var stored int64
	if err := db.QueryRowContext(ctx, "SELECT token FROM "+sqlguard.DefaultTable).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != math.MaxInt64 {
		t.Errorf("stored token %d, want MaxInt64", stored)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, name := range []string{"", "1fences", "fences; DROP TABLE x", `"quoted"`, "a.b.c", "a-b"} {
		if _, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithTable(name)); !errors.Is(err, backend.ErrInvalidConfig) {
			t.Errorf("WithTable(%q): got %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := sqlguard.New(sqlguard.Dialect{}); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Errorf("zero Dialect: got %v, want ErrInvalidConfig", err)
	}
	if _, err := sqlguard.New(sqlguard.Postgres, sqlguard.WithTable("app.fences")); err != nil {
		t.Errorf("schema-qualified table: %v", err)
	}
}
