package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/sqlbackend"
)

// A lock file shared by the processes of one machine: SQLite in WAL mode.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "locks.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
	if err != nil {
		panic(err) // e.g. a *sqlbackend.SafetyError
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		panic(err)
	}
	c := fencing.New(b)
	lease, err := c.Grant(ctx, "jobs/nightly", time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println("token", lease.Token)
	_, err = c.Grant(ctx, "jobs/nightly", time.Minute)
	fmt.Println("second grant held:", errors.Is(err, fencing.ErrLeaseHeld))
	// Output:
	// token 1
	// second grant held: true
}

// AdmitTx: the write commits only while the lease that admitted it is live.
func ExampleBackend_AdmitTx() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	defer db.Close()
	ctx := context.Background()
	b, _ := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
	defer b.Close()
	b.CreateTables(ctx)
	db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)`)
	c := fencing.New(b)

	old, _ := c.Grant(ctx, "orders", time.Minute)
	c.ForceRelease(ctx, "orders") // the old holder is paused, say, and its lease taken
	c.Grant(ctx, "orders", time.Minute)

	write := func(token uint64, total int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO orders VALUES (42, ?)`, total); err != nil {
			return err
		}
		if err := b.AdmitTx(ctx, tx, "orders", token); err != nil {
			return err // rolled back: nothing applied
		}
		return tx.Commit()
	}
	err := write(old.Token, 100)
	fmt.Println("old holder:", errors.Is(err, guard.ErrStaleToken))
	var n int
	db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	fmt.Println("rows:", n)
	// Output:
	// old holder: true
	// rows: 0
}
