package bench

import (
	"bufio"
	"context"
	cryptorand "crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// sqlSection compares the SQL backend, through fencing.Coordinator:
//
//   - on PostgreSQL (durable, and with fsync off as an extra; see
//     pgSection) with a hand-written fenced row lease (rowLease: one
//     upsert to acquire, one UPDATE to release), with the table-lease
//     pattern of pglock (a transaction of SELECT ... FOR UPDATE and UPDATE
//     or INSERT to acquire, one UPDATE to release), with
//     pg_try_advisory_lock + pg_advisory_unlock on one session (no token,
//     no durability: the floor) and with SELECT 1 round trips;
//   - on SQLite (a WAL file) with a flock(2) lock/unlock pair on a file,
//     and the Lock handoff between two processes against a blocking
//     flock(2) waiter (see sqliteHandoff).
func sqlSection(t *testing.T, r *report) {
	pgSection(t, r, true)
	pgSection(t, r, false)
	sqliteSection(t, r)
}

// pgSection compares on a PostgreSQL server of its own, durable (fsync and
// synchronous_commit on, PostgreSQL's defaults, as users run it) or with
// fsync off (pgtest's test setting; Grant+Release only, a labelled extra).
func pgSection(t *testing.T, r *report, durable bool) {
	srv := pgtest.StartConfig(t, pgtest.Config{Durable: durable})
	db := poolOf64(t, "pgx", srv.DSN())
	ctx := context.Background()
	coord := sqlCoordinator(t, db, sqlbackend.Postgres)
	for _, ddl := range []string{
		`CREATE TABLE peer_locks (name TEXT PRIMARY KEY, owner TEXT, rvn BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)`,
		`CREATE TABLE row_leases (name TEXT PRIMARY KEY, token BIGINT NOT NULL, holder TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	store := "PostgreSQL (fsync on)"
	if !durable {
		store = "PostgreSQL (fsync off)"
	}
	r.notes = append(r.notes, fmt.Sprintf("SQL section: %s, a PostgreSQL 15 child process (every contender alike), pgx v5 stdlib, a pool of 64.", store))
	for _, g := range []int{1, 32} {
		keys := disjointKeys(g, 1)
		c := &comparison{
			store: "sql", op: store + " Grant+Release", goroutines: g,
			contenders: []contender{
				{name: "ours", worker: grantReleaseWorker(coord, keys)},
				{name: "row lease (one upsert, one UPDATE)", worker: func(w int) func(int) error {
					name := keys[w][0]
					return func(i int) error { return rowLease(ctx, db, name, fmt.Sprintf("%d-%d", w, i)) }
				}},
				{name: "table lease (pglock's pattern)", worker: func(w int) func(int) error {
					name := keys[w][0]
					return func(i int) error { return tableLease(ctx, db, name, fmt.Sprintf("%d-%d", w, i)) }
				}},
				{name: "advisory lock+unlock", worker: sessionLockWorker(t, db, "SELECT pg_try_advisory_lock($1)", "SELECT pg_advisory_unlock($1)",
					func(w int) any { return int64(w) })},
				{name: "2x SELECT 1", worker: selectTwiceWorker(db)},
			},
		}
		r.compare(t, c)
	}
	if !durable {
		return
	}
	for _, g := range []int{1, 32} {
		keys := disjointKeys(g, 1)
		leases := make([]fencing.Lease, g)
		for w := range g {
			var err error
			if leases[w], err = coord.Grant(ctx, fmt.Sprintf("check/%d/%s", g, keys[w][0]), leaseTTL); err != nil {
				t.Fatal(err)
			}
		}
		r.compare(t, &comparison{
			store: "sql", op: store + " CheckToken", goroutines: g,
			contenders: []contender{
				{name: "ours", worker: func(w int) func(int) error {
					l := leases[w]
					return func(int) error {
						ok, err := coord.CheckToken(ctx, l.Key, l.Token)
						if err == nil && !ok {
							err = errors.New("token check failed")
						}
						return err
					}
				}},
				{name: "SELECT 1", worker: func(int) func(int) error {
					return func(int) error { return selectOne(ctx, db) }
				}},
			},
		})
	}
}

// sqliteSection compares SQLite (a WAL file) with a flock(2) lock/unlock
// pair on a file, and times the Lock handoff between two processes against
// a blocking flock(2) waiter (see sqliteHandoff).
func sqliteSection(t *testing.T, r *report) {
	ctx := context.Background()
	r.notes = append(r.notes, "SQL section: SQLite: modernc.org/sqlite, WAL, synchronous FULL.")
	lite, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "bench.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	liteCoord := sqlCoordinator(t, lite, sqlbackend.SQLite)
	lockFile := filepath.Join(t.TempDir(), "flock")
	r.compare(t, &comparison{
		store: "sql", op: "SQLite Grant+Release", goroutines: 1,
		contenders: []contender{
			{name: "ours", worker: func(int) func(int) error {
				return func(int) error {
					l, err := liteCoord.Grant(ctx, "k", leaseTTL)
					if err != nil {
						return err
					}
					return liteCoord.Release(ctx, "k", l.ID)
				}
			}},
			{name: "flock lock+unlock", worker: flockWorker(t, lockFile)},
		},
	})
	lease, err := liteCoord.Grant(ctx, "check", leaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	r.compare(t, &comparison{
		store: "sql", op: "SQLite CheckToken", goroutines: 1,
		contenders: []contender{
			{name: "ours", worker: func(int) func(int) error {
				return func(int) error {
					_, err := liteCoord.CheckToken(ctx, "check", lease.Token)
					return err
				}
			}},
			{name: "flock lock+unlock", worker: flockWorker(t, lockFile)},
		},
	})
	r.notes = append(r.notes, sqliteHandoff(t, 10*r.rounds))
}

// sqliteDSN opens a SQLite file as every SQLite contender does: WAL,
// synchronous FULL, a busy timeout of 10 s.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
}

// sqlCoordinator returns a Coordinator over tables of its own in db.
func sqlCoordinator(t *testing.T, db *sql.DB, d sqlbackend.Dialect) *fencing.Coordinator {
	return sqlCoordinatorPrefix(t, db, d, "bench_"+cryptorand.Text()[:8]+"_")
}

// sqlCoordinatorPrefix returns a Coordinator over the tables named with
// prefix in db, created if need be.
func sqlCoordinatorPrefix(t *testing.T, db *sql.DB, d sqlbackend.Dialect, prefix string) *fencing.Coordinator {
	t.Helper()
	return fencing.New(sqlBackendPrefix(t, db, d, prefix))
}

// sqlBackendPrefix returns a backend over the tables named with prefix in
// db, created if need be, closed when t ends.
func sqlBackendPrefix(t *testing.T, db *sql.DB, d sqlbackend.Dialect, prefix string) *sqlbackend.Backend {
	t.Helper()
	b, err := newSQLBackend(db, d, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTables(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

// newSQLBackend is the benchmarks' backend on db: the tables named with
// prefix, no safety checks (PostgreSQL may run with fsync off).
func newSQLBackend(db *sql.DB, d sqlbackend.Dialect, prefix string) (*sqlbackend.Backend, error) {
	return sqlbackend.New(context.Background(), db, d, sqlbackend.WithSafetyCheck(backend.CheckSkip), sqlbackend.WithTablePrefix(prefix))
}

func selectOne(ctx context.Context, db *sql.DB) error {
	var one int
	return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// rowLease acquires and releases name as a fenced row lease written by
// hand: one INSERT ... ON CONFLICT ... DO UPDATE ... WHERE expired
// RETURNING token, which takes the row only when its lease has expired and
// returns the next token, then one UPDATE that ends the lease. It keeps no
// lease ID for resends, no lock delay, no owner and wakes no waiter.
func rowLease(ctx context.Context, db *sql.DB, name, holder string) error {
	var token int64
	err := db.QueryRowContext(ctx, `INSERT INTO row_leases AS l (name, token, holder, expires_at) VALUES ($1, 1, $2, clock_timestamp() + interval '1 minute') `+
		`ON CONFLICT (name) DO UPDATE SET token = l.token + 1, holder = excluded.holder, expires_at = excluded.expires_at `+
		`WHERE l.expires_at <= clock_timestamp() RETURNING token`, name, holder).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return errors.New("row lease held")
	}
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `UPDATE row_leases SET expires_at = '-infinity' WHERE name = $1 AND holder = $2`, name, holder)
	return err
}

// tableLease acquires and releases name the way pglock does: a
// transaction that locks the row and takes it (or inserts it), then an
// UPDATE that gives it back.
func tableLease(ctx context.Context, db *sql.DB, name, owner string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var cur sql.NullString
	var expires time.Time
	err = tx.QueryRowContext(ctx, `SELECT owner, expires_at FROM peer_locks WHERE name = $1 FOR UPDATE`, name).Scan(&cur, &expires)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = tx.ExecContext(ctx, `INSERT INTO peer_locks (name, owner, rvn, expires_at) VALUES ($1, $2, 1, now() + interval '1 minute')`, name, owner)
	case err == nil && cur.Valid && expires.After(time.Now()):
		return errors.New("table lease held")
	case err == nil:
		_, err = tx.ExecContext(ctx, `UPDATE peer_locks SET owner = $2, rvn = rvn + 1, expires_at = now() + interval '1 minute' WHERE name = $1`, name, owner)
	}
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `UPDATE peer_locks SET owner = NULL WHERE name = $1 AND owner = $2`, name, owner)
	return err
}

// sessionLockWorker returns workers that each keep one session of db and
// take and give back a lock of their own on it, as advisory-lock and
// GET_LOCK libraries do: lock (which answers whether it got the lock) and
// unlock, each with the worker's lock name(w) as its one argument.
func sessionLockWorker(t *testing.T, db *sql.DB, lock, unlock string, name func(w int) any) func(w int) func(int) error {
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
		arg := name(w)
		return func(int) error {
			ctx := context.Background()
			var got sql.NullBool
			if err := conn.QueryRowContext(ctx, lock, arg).Scan(&got); err != nil {
				return err
			}
			if !got.Bool {
				return fmt.Errorf("%s: not taken", lock)
			}
			return conn.QueryRowContext(ctx, unlock, arg).Scan(&got)
		}
	}
}

// grantReleaseWorker returns workers that each grant and release their
// own key (keys[w][0]) through coord.
func grantReleaseWorker(coord *fencing.Coordinator, keys [][]string) func(w int) func(int) error {
	return func(w int) func(int) error {
		key := keys[w][0]
		return func(int) error {
			ctx := context.Background()
			l, err := coord.Grant(ctx, key, leaseTTL)
			if err != nil {
				return err
			}
			return coord.Release(ctx, key, l.ID)
		}
	}
}

// selectTwiceWorker returns workers that make two SELECT 1 round trips:
// what a grant and a release of one statement each cost at the least.
func selectTwiceWorker(db *sql.DB) func(int) func(int) error {
	return func(int) func(int) error {
		return func(int) error {
			ctx := context.Background()
			if err := selectOne(ctx, db); err != nil {
				return err
			}
			return selectOne(ctx, db)
		}
	}
}

// poolOf64 opens dsn with driver, with a pool of 64 connections kept open,
// and closes it when t ends.
func poolOf64(t *testing.T, driver, dsn string) *sql.DB {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	return db
}

// flockWorker locks and unlocks a file with flock(2), the shell's lock.
func flockWorker(t *testing.T, path string) func(int) func(int) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fd := int(f.Fd())
	return func(int) func(int) error {
		return func(int) error {
			if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				return err
			}
			return syscall.Flock(fd, syscall.LOCK_UN)
		}
	}
}

// sqliteHandoffEnv, set to a directory, makes the test binary the waiter
// of sqliteHandoff (see sqliteHandoffChild) instead of running tests.
const sqliteHandoffEnv = "BENCH_SQLITE_HANDOFF_DIR"

const (
	// sqliteHandoffPrefix names the tables of the handoff's database, a
	// file of its own.
	sqliteHandoffPrefix = "bench_handoff_"
	sqliteHandoffKey    = "handoff"
	// sqlitePoll is how often sqlbackend's waiters on SQLite read the rows
	// of the keys they wait for (its notify.go).
	sqlitePoll = 10 * time.Millisecond
	// sqliteSettle is the least time a handoff round lets the waiter settle
	// into waiting before the release; a random pause of up to
	// 2*sqlitePoll is added, so that the release falls at any point of
	// the waiter's poll.
	sqliteSettle = 30 * time.Millisecond
)

// sqliteHandoff times rounds lock handoffs of each kind between this
// process and a child process (this test binary again, see
// sqliteHandoffChild), in a shuffled order each round, and returns a
// Markdown table. This process holds the key and releases it; the child
// waits, and reads CLOCK_MONOTONIC (one clock for both processes) when its
// lock call returns:
//
//   - ours: a Coordinator.Grant, then Coordinator.Release, to a
//     Coordinator.Lock in the child, on one SQLite file (WAL, synchronous
//     FULL). The waiter learns of the release from another process by
//     polling: every 10 ms it reads the key's row.
//   - flock: flock(2) LOCK_UN to a blocking LOCK_EX in the child, on one
//     file: the kernel wakes the waiter.
//
// The child's lock call returning before the release's call would mean
// both held the lock at once: the test fails.
func sqliteHandoff(t *testing.T, rounds int) string {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "handoff.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	coord := sqlCoordinatorPrefix(t, db, sqlbackend.SQLite, sqliteHandoffPrefix)
	lockFile, err := os.OpenFile(filepath.Join(dir, "flock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lockFile.Close() })
	fd := int(lockFile.Fd())

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sqliteHandoffEnv+"="+dir)
	cmd.Stderr = os.Stderr
	toChild, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the waiter process: %v", err)
	}
	t.Cleanup(func() {
		toChild.Close() // the child returns at the end of its input
		if t.Failed() {
			cmd.Process.Kill() // it may be waiting for a lock never released
			cmd.Wait()
			return
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("waiter process: %v", err)
		}
	})
	fromChild := bufio.NewScanner(stdout)
	expect := func(want string) error {
		if !fromChild.Scan() {
			return fmt.Errorf("waiter process: %v (expected %q)", fromChild.Err(), want)
		}
		if got := fromChild.Text(); got != want {
			return fmt.Errorf("waiter process: %q, expected %q", got, want)
		}
		return nil
	}
	if err := expect("ready"); err != nil {
		t.Fatal(err)
	}

	// round holds the lock, has the child wait for it in the way kind
	// names, releases it and returns the handoff's times.
	round := func(kind string, hold func() (release func() error, err error)) (fromCall, fromReturn time.Duration, err error) {
		release, err := hold()
		if err != nil {
			return 0, 0, err
		}
		fmt.Fprintln(toChild, kind)
		if err := expect("waiting"); err != nil {
			return 0, 0, err
		}
		time.Sleep(sqliteSettle + rand.N(2*sqlitePoll))
		called := monotonic()
		if err := release(); err != nil {
			return 0, 0, err
		}
		returned := monotonic()
		if !fromChild.Scan() {
			return 0, 0, fmt.Errorf("waiter process: %v", fromChild.Err())
		}
		at, ok := strings.CutPrefix(fromChild.Text(), "locked ")
		ns, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil {
			return 0, 0, fmt.Errorf("waiter process: %q", fromChild.Text())
		}
		locked := time.Duration(ns)
		if locked < called {
			return 0, 0, fmt.Errorf("the waiter's lock returned %v before the release was called", called-locked)
		}
		return locked - called, locked - returned, nil
	}
	kinds := []timedHandoff{
		{name: "ours: Coordinator.Release → Coordinator.Lock (polls every 10 ms)", short: "ours", fn: func() (time.Duration, time.Duration, error) {
			return round("fencing", func() (func() error, error) {
				l, err := coord.Grant(ctx, sqliteHandoffKey, leaseTTL)
				return func() error { return coord.Release(ctx, sqliteHandoffKey, l.ID) }, err
			})
		}},
		{name: "flock(2): LOCK_UN → blocking LOCK_EX", short: "flock", fn: func() (time.Duration, time.Duration, error) {
			return round("flock", func() (func() error, error) {
				err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
				return func() error { return syscall.Flock(fd, syscall.LOCK_UN) }, err
			})
		}},
	}
	table := timedHandoffTable(t, kinds, rounds)
	return fmt.Sprintf("\nLock handoff on SQLite between two processes, %d rounds each (%v plus a random 0-%v pause before each release; "+
		"the waiter is a child process, ours polls the key's row every %v); µs from the holder's release until the waiter's lock returned "+
		"(negative: before the release's call returned):\n\n", rounds, sqliteSettle, 2*sqlitePoll, sqlitePoll) + table
}

// sqliteHandoffChild is the waiter of sqliteHandoff, in a process of its
// own on dir's files. For each line of its input ("fencing" or "flock") it
// says "waiting", waits for the lock that way, reads CLOCK_MONOTONIC when
// the lock call returns, unlocks and says "locked" and the reading in ns.
// It returns the process's exit code at the end of its input.
func sqliteHandoffChild(dir string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "sqlite handoff waiter:", err)
		return 1
	}
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "handoff.db")))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	b, err := newSQLBackend(db, sqlbackend.SQLite, sqliteHandoffPrefix)
	if err != nil {
		return fail(err)
	}
	defer b.Close()
	coord := fencing.New(b)
	f, err := os.OpenFile(filepath.Join(dir, "flock"), os.O_RDWR, 0)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println("waiting")
		var locked time.Duration
		switch in.Text() {
		case "fencing":
			h, err := coord.Lock(ctx, sqliteHandoffKey, leaseTTL)
			locked = monotonic()
			if err == nil {
				err = h.Release(ctx)
			}
			if err != nil {
				return fail(err)
			}
		case "flock":
			err := syscall.Flock(fd, syscall.LOCK_EX)
			locked = monotonic()
			if err == nil {
				err = syscall.Flock(fd, syscall.LOCK_UN)
			}
			if err != nil {
				return fail(err)
			}
		default:
			return fail(fmt.Errorf("unknown kind %q", in.Text()))
		}
		fmt.Println("locked", int64(locked))
	}
	if err := in.Err(); err != nil {
		return fail(err)
	}
	return 0
}

// monotonic reads CLOCK_MONOTONIC, one clock for every process of the
// host (Go's monotonic readings count from each process's start).
func monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}
