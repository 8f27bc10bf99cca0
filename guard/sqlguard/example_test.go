package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	_ "modernc.org/sqlite"
)

// A holder writes in its own transaction, admitting its token first; a
// stale holder's transaction is refused and writes nothing. It runs on a
// real SQLite database.
func Example() {
	dir, err := os.MkdirTemp("", "sqlguard-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	g, err := sqlguard.New(sqlguard.SQLite)
	if err != nil {
		log.Fatal(err)
	}
	if err := g.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)`); err != nil {
		log.Fatal(err)
	}

	setTotal := func(token uint64, total int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := g.Admit(ctx, tx, "orders/42", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (42, ?)
			ON CONFLICT (id) DO UPDATE SET total = excluded.total`, total); err != nil {
			return err
		}
		return tx.Commit()
	}

	fmt.Println("token 2 writes 200:", setTotal(2, 200))
	err = setTotal(1, 100) // the previous holder, late
	fmt.Println("token 1 writes 100: stale:", errors.Is(err, guard.ErrStaleToken))

	var total int
	if err := db.QueryRowContext(ctx, `SELECT total FROM orders WHERE id = 42`).Scan(&total); err != nil {
		log.Fatal(err)
	}
	fmt.Println("total:", total)
	// Output:
	// token 2 writes 200: <nil>
	// token 1 writes 100: stale: true
	// total: 200
}

// The Postgres dialect is used the same way, with a driver such as pgx's
// stdlib adapter. This example needs a server, so it only compiles.
func ExampleGuard_Write() {
	var db *sql.DB // sql.Open("pgx", "postgres://...")
	var token uint64
	g, err := sqlguard.New(sqlguard.Postgres)
	if err != nil {
		log.Fatal(err)
	}
	err = g.Write(context.Background(), db, nil, "orders/42", token, func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE orders SET total = $1 WHERE id = 42`, 200)
		return err
	})
	if errors.Is(err, guard.ErrStaleToken) {
		log.Print("a later holder has written: stop")
	}
}

// A new holder fences the previous one out before its first write, with
// Takeover on the database; the previous holder's late transaction is then
// refused.
func ExampleGuard_Takeover() {
	dir, err := os.MkdirTemp("", "sqlguard-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	g, err := sqlguard.New(sqlguard.SQLite)
	if err != nil {
		log.Fatal(err)
	}
	if err := g.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}

	fmt.Println("token 3 takes over:", g.Takeover(ctx, db, "orders/42", 3))
	err = g.Write(ctx, db, nil, "orders/42", 2, func(tx *sql.Tx) error { return nil })
	fmt.Println("token 2 writes: stale:", errors.Is(err, guard.ErrStaleToken))
	// Output:
	// token 3 takes over: <nil>
	// token 2 writes: stale: true
}
