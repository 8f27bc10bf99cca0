package sqlguard_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
)

// Replicas of a deployment start together: CreateTable runs at the same
// moment on 16 connections (pools of their own), on a database without
// the table and on one that has it, 20 times. Every call succeeds.

func TestPostgresCreateTableTogether(t *testing.T) {
	srv := pgtest.Start(t)
	bouncer := pgtest.StartBouncer(t, srv, 4)
	createTogether(t, sqlguard.Postgres, func(run int) (string, string, []string) {
		// Half the callers go through PgBouncer in transaction mode.
		return "pgx", fmt.Sprintf("fences_%d", run), []string{srv.DSN(), bouncer.DSN()}
	})
}

func TestSQLiteCreateTableTogether(t *testing.T) {
	dir := t.TempDir()
	createTogether(t, sqlguard.SQLite, func(run int) (string, string, []string) {
		// A fresh file each time, opened as the package documentation
		// says (a busy timeout).
		path := filepath.Join(dir, fmt.Sprintf("fresh%d.db", run))
		return "sqlite", sqlguard.DefaultTable, []string{"file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"}
	})
}

func createTogether(t *testing.T, d sqlguard.Dialect, round func(run int) (driver, table string, dsns []string)) {
	const callers, runs = 16, 20
	failures := 0
	for run := range runs {
		driver, table, dsns := round(run)
		g, err := sqlguard.New(d, sqlguard.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		for _, pass := range []string{"fresh", "existing"} {
			errs := make([]error, callers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range callers {
				db, err := sql.Open(driver, dsns[i%len(dsns)])
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()                  // on a Fatal; the caller closes it when done
				if err := db.Ping(); err != nil { // connected before the start
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					<-start
					errs[i] = g.CreateTable(ctx, db)
					db.Close()
				}()
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					failures++
					t.Errorf("run %d (%s table), caller %d: %v", run, pass, i, err)
				}
			}
		}
	}
	t.Logf("%d rounds of %d callers (fresh and existing table): %d failures", 2*runs, callers, failures)
}
