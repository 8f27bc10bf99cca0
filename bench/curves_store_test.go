package bench

import (
	"context"
	cryptorand "crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/redisbackend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// curveStore is one store the curves measure: its backend, and how the
// curves fill it, size it and read its load.
type curveStore struct {
	b backend.Backend
	// another returns a further backend over the same store, as another
	// process would make (its own pool or client), closed when t ends.
	another func(t *testing.T) backend.Backend
	// fill adds the records of idle keys keyName(from) .. keyName(to-1),
	// copies of the record the backend's own Grant and Release left on
	// curveTemplate (see fillHow).
	fill func(ctx context.Context, from, to int) error
	// fillHow says how fill writes.
	fillHow string
	// bytes is the store's size in bytes, as the store counts it.
	bytes func(ctx context.Context) (int64, error)
	// load describes the store's own load: connections, LISTEN sessions,
	// subscriptions, watchers.
	load func(ctx context.Context) string
}

// curveTemplate is the key whose record fill copies.
const curveTemplate = "curves-template"

// keyName is the i-th key of a curve: 16 hexadecimal digits of a
// bijective mix of i, so that consecutive keys land far apart in an index.
func keyName(i int) string {
	x := uint64(i) + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], x)
	return "curves/" + hex.EncodeToString(b[:])
}

// curveStores are the backends the curves know, by name.
var curveStores = map[string]func(t *testing.T, instance string) *curveStore{
	"memory":   curveMemory,
	"sqlite":   curveSQLite,
	"postgres": curvePostgres,
	"mariadb":  curveMariaDB,
	"redis":    curveRedis,
	"etcd":     curveEtcd,
	"kube":     curveKube,
}

// leaveTemplate grants and releases curveTemplate through b, so that its
// record is one the backend wrote.
func leaveTemplate(ctx context.Context, b backend.Backend) error {
	id := cryptorand.Text()
	if _, err := b.Grant(ctx, backend.Request{Key: curveTemplate, LeaseID: id, Timeout: time.Minute}); err != nil {
		return fmt.Errorf("grant the template: %w", err)
	}
	if err := b.Release(ctx, curveTemplate, id); err != nil {
		return fmt.Errorf("release the template: %w", err)
	}
	return nil
}

func curveMemory(t *testing.T, _ string) *curveStore {
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	return &curveStore{
		b:       b,
		another: func(*testing.T) backend.Backend { return b },
		fillHow: "the backend's own Grant and Release, one key after another",
		fill: func(ctx context.Context, from, to int) error {
			for i := from; i < to; i++ {
				id := cryptorand.Text()
				if _, err := b.Grant(ctx, backend.Request{Key: keyName(i), LeaseID: id, Timeout: time.Minute}); err != nil {
					return err
				}
				if err := b.Release(ctx, keyName(i), id); err != nil {
					return err
				}
			}
			return nil
		},
		bytes: func(context.Context) (int64, error) {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return int64(m.HeapAlloc), nil
		},
		load: func(context.Context) string { return "" },
	}
}

func curveSQLite(t *testing.T, instance string) *curveStore {
	dsn := sqliteDSN(filepath.Join(t.TempDir(), "curves-"+instance+".db"))
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := curveSQL(t, curveSQLBackend(t, db, sqlbackend.SQLite), db, `"`, func(n int) string { return "?" })
	st.another = func(t *testing.T) backend.Backend {
		return curveSQLBackend(t, defaultPool(t, "sqlite", dsn), sqlbackend.SQLite)
	}
	st.bytes = func(ctx context.Context) (int64, error) {
		var n int64
		err := db.QueryRowContext(ctx, `SELECT (page_count - freelist_count) * page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()`).Scan(&n)
		return n, err
	}
	st.load = func(context.Context) string { return "" }
	return st
}

func curvePostgres(t *testing.T, instance string) *curveStore {
	srv := pgtest.Start(t)
	db := poolOf64(t, "pgx", srv.DSN())
	// WithListener, as docs/sql.md advises: waiters hear releases on one
	// LISTEN session per backend instead of polling.
	listen := sqlbackend.WithListener(srv.DSN())
	st := curveSQL(t, curveSQLBackend(t, db, sqlbackend.Postgres, listen), db, `"`, func(n int) string { return fmt.Sprintf("$%d", n) })
	st.another = func(t *testing.T) backend.Backend {
		return curveSQLBackend(t, defaultPool(t, "pgx", srv.DSN()), sqlbackend.Postgres, listen)
	}
	st.bytes = func(ctx context.Context) (int64, error) {
		var n int64
		err := db.QueryRowContext(ctx, `SELECT pg_total_relation_size('curves_leases')`).Scan(&n)
		return n, err
	}
	st.load = func(ctx context.Context) string {
		var all, listen, active int
		err := db.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE query ILIKE 'listen%'), count(*) FILTER (WHERE state <> 'idle')
			FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&all, &listen, &active)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("connections %d (LISTEN sessions %d, not idle %d)", all, listen, active)
	}
	return st
}

// defaultPool is a database/sql pool with its defaults (no limit on open
// connections, 2 idle), as a process would open it, closed when t ends.
func defaultPool(t *testing.T, driver, dsn string) *sql.DB {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// curveSQLBackend is a backend over the curves' tables in db, created if
// need be, closed when t ends.
func curveSQLBackend(t *testing.T, db *sql.DB, d sqlbackend.Dialect, opts ...sqlbackend.Option) *sqlbackend.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts = append([]sqlbackend.Option{sqlbackend.WithSafetyCheck(backend.CheckSkip), sqlbackend.WithTablePrefix("curves_")}, opts...)
	b, err := sqlbackend.New(ctx, db, d, opts...)
	if err != nil {
		t.Fatalf("sqlbackend.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTables(ctx); err != nil {
		t.Fatalf("CreateTables: %v", err)
	}
	return b
}

func curveMariaDB(t *testing.T, instance string) *curveStore {
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	srv := mysqltest.Start(t)
	db := poolOf64(t, "mysql", srv.DSN())
	st := curveSQL(t, curveSQLBackend(t, db, sqlbackend.MySQL), db, "`", func(int) string { return "?" })
	st.another = func(t *testing.T) backend.Backend {
		return curveSQLBackend(t, defaultPool(t, "mysql", srv.DSN()), sqlbackend.MySQL)
	}
	st.bytes = func(ctx context.Context) (int64, error) {
		if _, err := db.ExecContext(ctx, `ANALYZE TABLE curves_leases`); err != nil {
			return 0, err
		}
		var n int64
		err := db.QueryRowContext(ctx, `SELECT data_length + index_length FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'curves_leases'`).Scan(&n)
		return n, err
	}
	st.load = func(ctx context.Context) string {
		var name string
		var n int
		if err := db.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE 'Threads_connected'`).Scan(&name, &n); err != nil {
			return "error: " + err.Error()
		}
		status := map[string]int{}
		rows, err := db.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_deadlocks', 'Innodb_row_lock_current_waits')`)
		if err == nil {
			for rows.Next() {
				var k string
				var v int
				if rows.Scan(&k, &v) == nil {
					status[k] = v
				}
			}
			rows.Close()
		}
		return fmt.Sprintf("connections %d (waiting on a row lock %d; deadlocks so far %d)", n-1, status["Innodb_row_lock_current_waits"], status["Innodb_deadlocks"])
	}
	return st
}

// curveSQL is the SQL store of b over db: the lease table curves_leases,
// filled by multi-row INSERTs of copies of the template's row (every
// column as the backend wrote it, the key replaced), quote quoting a
// column name and param numbering a placeholder.
func curveSQL(t *testing.T, b *sqlbackend.Backend, db *sql.DB, quote string, param func(n int) string) *curveStore {
	const table = "curves_leases"
	return &curveStore{
		b:       b,
		fillHow: "multi-row INSERTs (500 rows each) of copies of the row the backend's own Grant and Release left on a template key, the key column replaced",
		fill: func(ctx context.Context, from, to int) error {
			if err := leaveTemplate(ctx, b); err != nil {
				return err
			}
			rows, err := db.QueryContext(ctx, fmt.Sprintf(`SELECT * FROM %s WHERE %skey%s = %s`, table, quote, quote, param(1)), []byte(curveTemplate))
			if err != nil {
				return err
			}
			cols, err := rows.Columns()
			if err != nil {
				rows.Close()
				return err
			}
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if !rows.Next() {
				rows.Close()
				return fmt.Errorf("no template row: %v", rows.Err())
			}
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return err
			}
			rows.Close()
			quoted := make([]string, len(cols))
			keyCol := -1
			for i, c := range cols {
				quoted[i] = quote + c + quote
				if c == "key" {
					keyCol = i
				}
			}
			const batch = 500
			for lo := from; lo < to; lo += batch {
				hi := min(lo+batch, to)
				var q strings.Builder
				fmt.Fprintf(&q, "INSERT INTO %s (%s) VALUES ", table, strings.Join(quoted, ", "))
				args := make([]any, 0, (hi-lo)*len(cols))
				for i := lo; i < hi; i++ {
					if i > lo {
						q.WriteString(", ")
					}
					q.WriteString("(")
					for j := range cols {
						if j > 0 {
							q.WriteString(", ")
						}
						args = append(args, vals[j])
						if j == keyCol {
							args[len(args)-1] = []byte(keyName(i))
						}
						q.WriteString(param(len(args)))
					}
					q.WriteString(")")
				}
				if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
					return fmt.Errorf("insert keys %d..%d: %w", lo, hi, err)
				}
			}
			return nil
		},
	}
}

func curveRedis(t *testing.T, instance string) *curveStore {
	srv := redistest.Start(t, redistest.Config{})
	newBackend := func(t *testing.T) *redisbackend.Backend {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		b, err := redisbackend.New(context.Background(), c, redisbackend.WithSafetyCheck(backend.CheckSkip))
		if err != nil {
			t.Fatalf("redisbackend.New: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b := newBackend(t)
	direct := srv.Client()
	return &curveStore{
		b:       b,
		another: func(t *testing.T) backend.Backend { return newBackend(t) },
		fillHow: "pipelined HSETs (1000 a pipeline) of copies of the hash the backend's own Grant and Release left on a template key",
		fill: func(ctx context.Context, from, to int) error {
			if err := leaveTemplate(ctx, b); err != nil {
				return err
			}
			tmpl, err := direct.HGetAll(ctx, b.RedisKey(curveTemplate)).Result()
			if err != nil {
				return err
			}
			for lo := from; lo < to; lo += 1000 {
				p := direct.Pipeline()
				for i := lo; i < min(lo+1000, to); i++ {
					p.HSet(ctx, b.RedisKey(keyName(i)), tmpl)
				}
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
			}
			return nil
		},
		bytes: func(ctx context.Context) (int64, error) {
			info, err := direct.Info(ctx, "memory").Result()
			if err != nil {
				return 0, err
			}
			n, err := infoField(info, "used_memory")
			return int64(n), err
		},
		load: func(ctx context.Context) string {
			list, err := direct.ClientList(ctx).Result()
			if err != nil {
				return "error: " + err.Error()
			}
			clients, subscribed := 0, 0
			for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
				clients++
				if strings.Contains(line, " sub=0 ") && strings.Contains(line, " psub=0 ") {
					continue
				}
				subscribed++
			}
			return fmt.Sprintf("clients %d (subscribed %d)", clients-1, subscribed)
		},
	}
}

func curveEtcd(t *testing.T, instance string) *curveStore {
	m := etcdtest.Start(t)
	const prefix = "curves/"
	newBackend := func(t *testing.T) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := etcdbackend.New(ctx, etcdtest.NewClient(t, m.Endpoints()), etcdbackend.WithPrefix(prefix))
		if err != nil {
			t.Fatalf("etcdbackend.New: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b := newBackend(t)
	direct := etcdtest.NewClient(t, m.Endpoints())
	enc := func(key string) string { return prefix + etcdKeyEncoding(key) + "/" }
	return &curveStore{
		b:       b,
		another: newBackend,
		fillHow: "Txns of 128 Puts (64 keys) of copies of the records the backend's own Grant and Release left on a template key",
		fill: func(ctx context.Context, from, to int) error {
			if err := leaveTemplate(ctx, b); err != nil {
				return err
			}
			base := enc(curveTemplate)
			r, err := direct.Get(ctx, base, clientv3.WithPrefix())
			if err != nil {
				return err
			}
			if len(r.Kvs) == 0 {
				return fmt.Errorf("no template records under %q", base)
			}
			per := 128 / len(r.Kvs)
			for lo := from; lo < to; lo += per {
				var ops []clientv3.Op
				for i := lo; i < min(lo+per, to); i++ {
					kb := enc(keyName(i))
					for _, kv := range r.Kvs {
						ops = append(ops, clientv3.OpPut(kb+strings.TrimPrefix(string(kv.Key), base), string(kv.Value)))
					}
				}
				if _, err := direct.Txn(ctx).Then(ops...).Commit(); err != nil {
					return err
				}
			}
			return nil
		},
		bytes: func(ctx context.Context) (int64, error) {
			s, err := direct.Status(ctx, m.Endpoints()[0])
			if err != nil {
				return 0, err
			}
			return s.DbSizeInUse, nil
		},
		load: func(ctx context.Context) string {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.ClientURL+"/metrics", nil)
			if err != nil {
				return "error: " + err.Error()
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return "error: " + err.Error()
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return "error: " + err.Error()
			}
			get := func(name string) string {
				for _, line := range strings.Split(string(body), "\n") {
					if v, ok := strings.CutPrefix(line, name+" "); ok {
						return v
					}
				}
				return "?"
			}
			conns, _ := tcpConnsTo(m.ClientURL[strings.LastIndex(m.ClientURL, ":")+1:])
			return fmt.Sprintf("TCP connections %d, watch streams %s, watchers %s", conns, get("etcd_debugging_mvcc_watch_stream_total"),
				get("etcd_debugging_mvcc_watcher_total"))
		},
	}
}

// etcdKeyEncoding is how etcdbackend names a user key in its etcd keys
// (etcdbackend's records.go).
func etcdKeyEncoding(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }
