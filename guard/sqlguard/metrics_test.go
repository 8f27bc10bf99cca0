package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/internal/testing/metrictest"
)

func TestCountsStaleTokens(t *testing.T) {
	mp := metrictest.New(t)
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	g, err := sqlguard.New(sqlguard.SQLite, sqlguard.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := g.Takeover(ctx, db, "r", 7); err != nil {
		t.Fatalf("Admit 7: %v", err)
	}
	if err := g.Takeover(ctx, db, "r", 6); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("Admit 6 after 7: %v, want ErrStaleToken", err)
	}
	if got := mp.Sum(t, guard.MetricStaleTokens); got != 1 {
		t.Fatalf("%s = %d, want 1", guard.MetricStaleTokens, got)
	}
}
