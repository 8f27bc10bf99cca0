package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
)

func TestPostgresConformance(t *testing.T) {
	db := pgtest.Start(t).DB(t)
	conformance.RunGuard(t, &sqlHarness{db: db, dialect: sqlguard.Postgres})
}

// At SERIALIZABLE a concurrent admit on the same resource fails with a
// serialization error instead of waiting and re-checking; it is never
// wrongly admitted, and a retry sees the committed fence.
func TestPostgresSerializable(t *testing.T) {
	db := pgtest.Start(t).DB(t)
	ctx := context.Background()
	g, err := sqlguard.New(sqlguard.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := g.Takeover(ctx, db, "r", 1); err != nil {
		t.Fatal(err)
	}
	serializable := &sql.TxOptions{Isolation: sql.LevelSerializable}
	first, err := db.BeginTx(ctx, serializable)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback()
	second, err := db.BeginTx(ctx, serializable)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Rollback()
	// The second transaction takes its snapshot before the first commits.
	var n int
	if err := second.QueryRowContext(ctx, "SELECT count(*) FROM "+sqlguard.DefaultTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, first, "r", 5); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	err = g.Admit(ctx, second, "r", 3)
	if err == nil || errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("Admit(3) in a SERIALIZABLE transaction older than the commit of 5: got %v, want a serialization failure", err)
	}
	t.Logf("as expected: %v", err)
	if err := g.Takeover(ctx, db, "r", 3); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("retried Admit(3): got %v, want ErrStaleToken", err)
	}
}
