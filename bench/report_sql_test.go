package bench

import (
	"context"
	cryptorand "crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// sqlSection compares the SQL backend, through fencing.Coordinator:
//
//   - on PostgreSQL (pgtest's server, fsync off for every contender alike)
//     with the table-lease pattern of pglock (a transaction of SELECT ...
//     FOR UPDATE and UPDATE or INSERT to acquire, one UPDATE to release),
//     with pg_try_advisory_lock + pg_advisory_unlock on one session (no
//     token, no durability: the floor) and with SELECT 1 round trips;
//   - on SQLite (a WAL file) with a flock(2) lock/unlock pair on a file.
func sqlSection(t *testing.T, r *report) {
	srv := pgtest.Start(t)
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	ctx := context.Background()
	coord := sqlCoordinator(t, db, sqlbackend.Postgres)
	if _, err := db.ExecContext(ctx, `CREATE TABLE peer_locks (name TEXT PRIMARY KEY, owner TEXT, rvn BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	r.notes = append(r.notes, "SQL section: PostgreSQL 15 child process with fsync off (every contender alike), pgx v5 stdlib, a pool of 64; SQLite: modernc.org/sqlite, WAL, synchronous FULL.")
	for _, g := range []int{1, 32} {
		keys := disjointKeys(g, 1)
		c := &comparison{
			store: "sql", op: "PostgreSQL Grant+Release", goroutines: g,
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
				{name: "table lease (pglock's pattern)", worker: func(w int) func(int) error {
					name := keys[w][0]
					return func(i int) error { return tableLease(ctx, db, name, fmt.Sprintf("%d-%d", w, i)) }
				}},
				{name: "advisory lock+unlock", worker: advisoryWorker(t, db)},
				{name: "2x SELECT 1", worker: func(int) func(int) error {
					return func(int) error {
						if err := selectOne(ctx, db); err != nil {
							return err
						}
						return selectOne(ctx, db)
					}
				}},
			},
		}
		r.compare(t, c)
	}
	for _, g := range []int{1, 32} {
		keys := disjointKeys(g, 1)
		leases := make([]fencing.Lease, g)
		for w := range g {
			if leases[w], err = coord.Grant(ctx, fmt.Sprintf("check/%d/%s", g, keys[w][0]), leaseTTL); err != nil {
				t.Fatal(err)
			}
		}
		r.compare(t, &comparison{
			store: "sql", op: "PostgreSQL CheckToken", goroutines: g,
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

	lite, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "bench.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
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
}

func sqlCoordinator(t *testing.T, db *sql.DB, d sqlbackend.Dialect) *fencing.Coordinator {
	t.Helper()
	b, err := sqlbackend.New(db, d, sqlbackend.WithoutSafetyChecks(), sqlbackend.WithTablePrefix("bench_"+cryptorand.Text()[:8]+"_"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTables(context.Background()); err != nil {
		t.Fatal(err)
	}
	return fencing.New(b)
}

func selectOne(ctx context.Context, db *sql.DB) error {
	var one int
	return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
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

// advisoryWorker returns workers that each keep one session and lock and
// unlock an advisory lock of their own on it.
func advisoryWorker(t *testing.T, db *sql.DB) func(w int) func(int) error {
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
		return func(int) error {
			ctx := context.Background()
			var got bool
			if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", int64(w)).Scan(&got); err != nil {
				return err
			}
			if !got {
				return errors.New("advisory lock held")
			}
			return conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", int64(w)).Scan(&got)
		}
	}
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
