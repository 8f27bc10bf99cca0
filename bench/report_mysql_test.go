package bench

import (
	"context"
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
	db := poolOf64(t, "mysql", srv.DSN())
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
				{name: "ours", worker: grantReleaseWorker(coord, keys)},
				{name: "GET_LOCK+RELEASE_LOCK", worker: sessionLockWorker(t, db, "SELECT GET_LOCK(?, 0)", "SELECT RELEASE_LOCK(?)",
					func(w int) any { return fmt.Sprintf("bench/%d", w) })},
				{name: "one-row UPDATE commit", worker: func(w int) func(int) error {
					return func(int) error {
						_, err := db.ExecContext(ctx, `UPDATE bench_rows SET n = n + 1 WHERE id = ?`, w)
						return err
					}
				}},
				{name: "2x SELECT 1", worker: selectTwiceWorker(db)},
			},
		})
	}
}
