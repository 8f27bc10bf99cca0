package mysqltest_test

import (
	"context"
	"testing"

	"github.com/fencing-go/fencing/internal/testing/mysqltest"
)

// Two servers run side by side, each with its own data; a crashed one
// restarts with what it committed.
func TestStartCrashRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := mysqltest.StartConfig(t, mysqltest.Config{Durable: true}), mysqltest.Start(t)
	if a.Port() == b.Port() || a.PID() == b.PID() {
		t.Fatalf("two servers share a port or a process")
	}
	db := a.DB(t)
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (n INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DB(t).ExecContext(ctx, "SELECT 1 FROM t"); err == nil {
		t.Fatal("the second server sees the first one's table")
	}
	a.Crash()
	a.Restart(t)
	var n int
	if err := db.QueryRowContext(ctx, "SELECT n FROM t").Scan(&n); err != nil || n != 7 {
		t.Fatalf("after a crash: %d, %v; want 7", n, err)
	}
}
