package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver

	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// mysqlSection compares the SQL backend's MySQL dialect, through
// fencing.Coordinator, on a MariaDB server of its own that syncs every
// commit (innodb_flush_log_at_trx_commit=1, InnoDB's fsync: MariaDB's
// defaults), with GET_LOCK+RELEASE_LOCK on one session per goroutine (no
// token, nothing durable: the floor every GET_LOCK library stands on),
// with a one-row UPDATE commit (the least a durable write costs) and with
// two SELECT 1 round trips. It runs again on a server that syncs nothing
// (InnoDB's nosync flush method, the tests' setting), a labelled extra
// that shows the cost of the statements without the disk's.
func mysqlSection(t *testing.T, r *report) {
	mysqlCompare(t, r, true)
	mysqlCompare(t, r, false)
}

func mysqlCompare(t *testing.T, r *report, durable bool) {
	srv := mysqltest.StartConfig(t, mysqltest.Config{Durable: durable})
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	ctx := context.Background()
	coord := sqlCoordinator(t, db, sqlbackend.MySQL)
	if _, err := db.ExecContext(ctx, `CREATE TABLE bench_rows (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	store := "MariaDB (synced)"
	if !durable {
		store = "MariaDB (nosync)"
	}
	r.notes = append(r.notes, fmt.Sprintf("MySQL section: %s, MariaDB %s, a child process with its defaults (every commit synced; "+
		"nosync: InnoDB's flush method nosync), go-sql-driver/mysql with interpolateParams=true, a pool of 64.", store, version))
	for _, g := range []int{1, 8} {
		keys := disjointKeys(g, 1)
		for w := range g {
			if _, err := db.ExecContext(ctx, `INSERT IGNORE INTO bench_rows VALUES (?, 0)`, w); err != nil {
				t.Fatal(err)
			}
		}
		r.compare(t, &comparison{
			store: "sql", op: store + " Grant+Release", goroutines: g,
			contenders: []contender{
				{name: "ours", worker: func(w int) func(int) error {
					key := keys[w][0]
					return func(int) error {
						l, err := coord.Grant(ctx, key, leaseTTL)
						if err != nil {
							return err
						}
						return coord.Release(ctx, key, l.ID)
					}
				}},
				{name: "GET_LOCK+RELEASE_LOCK", worker: getLockWorker(t, db)},
				{name: "one-row UPDATE commit", worker: func(w int) func(int) error {
					return func(int) error {
						_, err := db.ExecContext(ctx, `UPDATE bench_rows SET n = n + 1 WHERE id = ?`, w)
						return err
					}
				}},
				{name: "2x SELECT 1", worker: func(int) func(int) error {
					return func(int) error {
						if err := selectOne(ctx, db); err != nil {
							return err
						}
						return selectOne(ctx, db)
					}
				}},
			},
		})
	}
}

// getLockWorker returns workers that each keep one session and take and
// give back a named lock of their own on it, as GET_LOCK libraries do.
func getLockWorker(t *testing.T, db *sql.DB) func(w int) func(int) error {
	conns := map[int]*sql.Conn{}
	return func(w int) func(int) error {
		conn, ok := conns[w]
		if !ok {
			var err error
			if conn, err = db.Conn(context.Background()); err != nil {
				t.Fatal(err)
			}
			conns[w] = conn
			t.Cleanup(func() { conn.Close() })
		}
		name := fmt.Sprintf("bench/%d", w)
		return func(int) error {
			ctx := context.Background()
			var got sql.NullInt64
			if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil {
				return err
			}
			if got.Int64 != 1 {
				return errors.New("GET_LOCK: held")
			}
			return conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&got)
		}
	}
}
