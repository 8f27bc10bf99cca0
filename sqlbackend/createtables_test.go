package sqlbackend_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// Replicas of a deployment start together: New and CreateTables run at
// the same moment in many processes, on a database without the tables
// and on one that has them. Every call succeeds, and the tables work.
//
// The callers are half goroutines of the test and half child processes
// (role "create-tables"), each with a pool of its own, released at once;
// on PostgreSQL half of each go through PgBouncer in transaction mode.

const (
	createCallers = 16 // per round: createCallers/2 goroutines, createCallers/2 processes
	createRuns    = 20 // rounds on a fresh database, each followed by one on the same tables
)

func TestPostgresCreateTablesTogether(t *testing.T) {
	srv := pgtest.Start(t)
	bouncer := pgtest.StartBouncer(t, srv, 4)
	dsns := []string{srv.DSN(), bouncer.DSN()}
	createTogether(t, "postgres", func(run int) (string, []string) {
		return fmt.Sprintf("fresh%d_", run), dsns
	})
}

func TestSQLiteCreateTablesTogether(t *testing.T) {
	dir := t.TempDir()
	createTogether(t, "sqlite", func(run int) (string, []string) {
		path := filepath.Join(dir, fmt.Sprintf("fresh%d.db", run))
		// Half the callers set no busy timeout: the backend waits for
		// the write lock itself.
		return sqlbackend.DefaultPrefix, []string{sqliteDSN(path), "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"}
	})
}

// createTogether runs createRuns rounds of createCallers concurrent
// New+CreateTables on the database that round gives (a table prefix and
// the connection strings the callers take in turn), then
// the same again on the tables just made, and fails on any error.
func createTogether(t *testing.T, dialect string, round func(run int) (prefix string, where []string)) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type child struct {
		in  io.WriteCloser
		out *bufio.Scanner
	}
	var children []child
	for range createCallers / 2 {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=create-tables:"+dialect)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); _ = cmd.Wait() }) // the child exits at the end of its input
		children = append(children, child{in, bufio.NewScanner(out)})
	}
	failures := 0
	for run := range createRuns {
		prefix, where := round(run)
		for _, pass := range []string{"fresh", "existing"} {
			errs := make([]string, createCallers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range createCallers / 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if err := createTables(dialect, where[i%len(where)], prefix); err != nil {
						errs[i] = err.Error()
					}
				}()
			}
			// The children are told first: they take longer to begin.
			for i, c := range children {
				fmt.Fprintf(c.in, "%s %s\n", prefix, where[i%len(where)])
			}
			close(start)
			for i, c := range children {
				if !c.out.Scan() {
					t.Fatalf("run %d: child %d ended: %v", run, i, c.out.Err())
				}
				if line := c.out.Text(); line != "ok" {
					errs[createCallers/2+i] = line
				}
			}
			wg.Wait()
			for i, e := range errs {
				if e != "" {
					failures++
					t.Errorf("run %d (%s tables), caller %d: %s", run, pass, i, e)
				}
			}
		}
		checkTablesWork(t, dialect, where[0], prefix)
	}
	t.Logf("%d rounds of %d callers (fresh and existing tables): %d failures", 2*createRuns, createCallers, failures)
}

// createTables opens a pool on where, as a starting replica does, and runs
// New and CreateTables with the prefix.
func createTables(dialect, where, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, d, opts, err := openWhere(dialect, where, prefix)
	if err != nil {
		return err
	}
	defer db.Close()
	b, err := sqlbackend.New(context.Background(), db, d, opts...)
	if err != nil {
		return err
	}
	defer b.Close()
	return b.CreateTables(ctx)
}

func openWhere(dialect, where, prefix string) (*sql.DB, sqlbackend.Dialect, []sqlbackend.Option, error) {
	opts := []sqlbackend.Option{sqlbackend.WithTablePrefix(prefix)}
	if dialect == "postgres" {
		db, err := sqlOpenPgx(where)
		// The test server runs with fsync off.
		return db, sqlbackend.Postgres, append(opts, sqlbackend.WithSafetyCheck(backend.CheckSkip)), err
	}
	db, err := sql.Open("sqlite", where)
	return db, sqlbackend.SQLite, opts, err
}

// checkTablesWork grants a key on the tables made.
func checkTablesWork(t *testing.T, dialect, where, prefix string) {
	t.Helper()
	db, d, opts, err := openWhere(dialect, where, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := sqlbackend.New(context.Background(), db, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Grant(context.Background(), backend.Request{Key: "k", LeaseID: prefix, Timeout: time.Minute}); err != nil {
		t.Fatalf("grant on the tables made: %v", err)
	}
}

// runCreateChild is the child "create-tables": for each line "PREFIX
// WHERE" of its input it runs createTables and answers "ok" or the error,
// on one line.
func runCreateChild(dialect string) {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		prefix, where, _ := strings.Cut(in.Text(), " ")
		if err := createTables(dialect, where, prefix); err != nil {
			fmt.Println("error:", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Println("ok")
	}
}
