package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/redisbackend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// soakStore is one backend under soak: its Coordinator, what the nemesis
// can do to it, and how the sampler measures it.
type soakStore struct {
	coord *fencing.Coordinator
	// kill and restart crash the store's server and start it again on its
	// data (nil where the store is in this process). They run on the
	// test's goroutine.
	kill, restart func(t *testing.T)
	// proxy carries every connection of the Coordinator to the server (nil
	// where the store is in this process).
	proxy *faultproxy.Proxy
	// conns is the number of connections the server has open (its own
	// count, or the TCP connections to its port), size the number of
	// records the store keeps for the soak. Both read the server directly,
	// not through the proxy.
	conns, size func(ctx context.Context) (int, error)
	// child is how a child process reaches the store (through the proxy):
	// a DSN, an address or an endpoint; empty where the store is in this
	// process.
	child string
	// without are the operations of soakOps the traffic leaves out: those
	// the backend cannot serve (lockmany needs a backend.MultiGranter,
	// fifo a backend.Queuer), which would fail every round.
	without []string
}

// soakBackends are the backends TestSoak runs, in order.
// A backend marked soakOnly runs only under SOAK or when SOAK_BACKENDS
// names it, not in CI's smoke: kube's smoke starts etcd and kube-apiserver
// and restarts kube-apiserver once (the kill must run), 16 s alone at load
// 17, but how long kube-apiserver takes to become ready under CI's load is
// not bounded near the smoke's ~30 s a backend (kubetest waits up to 3
// minutes for it).
var soakBackends = []struct {
	name     string
	start    func(t *testing.T, ttl time.Duration) *soakStore
	soakOnly bool
}{
	{"memory", soakMemory, false},
	{"sqlite", soakSQLite, false},
	{"postgres", soakPostgres, false},
	{"mariadb", soakMariaDB, false},
	{"redis", soakRedis, false},
	{"etcd", soakEtcd, false},
	{"kube", soakKube, true},
}

// soakRequestTimeout bounds each request of the soak's Coordinators, so a
// stalled network ends requests in a stated time (fencing.ErrNoAnswer).
func soakRequestTimeout(ttl time.Duration) fencing.Option {
	return fencing.WithRequestTimeout(ttl)
}

func soakMemory(t *testing.T, ttl time.Duration) *soakStore {
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	coord := fencing.New(b, soakRequestTimeout(ttl))
	return &soakStore{
		coord: coord,
		conns: func(context.Context) (int, error) { return 0, nil },
		size:  func(ctx context.Context) (int, error) { return listCount(ctx, coord) },
	}
}

func soakSQLite(t *testing.T, ttl time.Duration) *soakStore {
	dsn := sqliteDSN(filepath.Join(t.TempDir(), "soak.db"))
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &soakStore{
		coord: fencing.New(sqlBackendPrefix(t, db, sqlbackend.SQLite, "soak_"), soakRequestTimeout(ttl)),
		child: dsn,
		conns: func(context.Context) (int, error) { return db.Stats().OpenConnections, nil },
		size: func(ctx context.Context) (int, error) {
			return sqlRows(ctx, db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'soak\_%' ESCAPE '\'`)
		},
	}
}

func soakPostgres(t *testing.T, ttl time.Duration) *soakStore {
	srv := pgtest.Start(t)
	st, direct := soakSQLServer(t, ttl, "pgx", sqlbackend.Postgres, srv.DSN(), srv.Port(), srv.DB(t))
	st.kill = func(*testing.T) { srv.Crash() }
	st.restart = func(t *testing.T) { srv.Restart(t) }
	st.conns = func(ctx context.Context) (int, error) {
		var n int
		err := direct.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&n)
		return n - 1, err // not the sampler's own
	}
	st.size = func(ctx context.Context) (int, error) {
		return sqlRows(ctx, direct, `SELECT tablename FROM pg_tables WHERE tablename LIKE 'soak\_%'`)
	}
	return st
}

func soakMariaDB(t *testing.T, ttl time.Duration) *soakStore {
	// Every killed connection would print a line ("unexpected EOF"): the
	// soak counts the failed rounds instead. The logger is the driver's,
	// global: it stays quiet for the tests that run after.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	srv := mysqltest.Start(t)
	st, direct := soakSQLServer(t, ttl, "mysql", sqlbackend.MySQL, srv.DSN(), srv.Port(), srv.DB(t))
	st.kill = func(*testing.T) { srv.Crash() }
	st.restart = func(t *testing.T) { srv.Restart(t) }
	st.conns = func(ctx context.Context) (int, error) {
		var name string
		var n int
		err := direct.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE 'Threads_connected'`).Scan(&name, &n)
		return n - 1, err // not the sampler's own
	}
	st.size = func(ctx context.Context) (int, error) {
		return sqlRows(ctx, direct, `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'soak\_%'`)
	}
	return st
}

// soakSQLServer returns the soak's store on the SQL server at dsn (which
// names 127.0.0.1:port), reached through a fault proxy with a pool of 64,
// and direct, the sampler's connection to the server itself.
func soakSQLServer(t *testing.T, ttl time.Duration, driver string, d sqlbackend.Dialect, dsn string, port int, direct *sql.DB) (*soakStore, *sql.DB) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	proxy := faultproxy.Start(t, addr, faultproxy.Hooks{})
	proxied := strings.Replace(dsn, addr, proxy.Addr(), 1)
	db := poolOf64(t, driver, proxied)
	direct.SetMaxOpenConns(1)
	return &soakStore{coord: fencing.New(sqlBackendPrefix(t, db, d, "soak_"), soakRequestTimeout(ttl)), proxy: proxy, child: proxied}, direct
}

// sqlRows returns the number of rows in every table the query names.
func sqlRows(ctx context.Context, db *sql.DB, tablesQuery string) (int, error) {
	rows, err := db.QueryContext(ctx, tablesQuery)
	if err != nil {
		return 0, err
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return 0, err
		}
		tables = append(tables, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	total := 0
	for _, name := range tables {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+name).Scan(&n); err != nil {
			return 0, fmt.Errorf("count %s: %w", name, err)
		}
		total += n
	}
	return total, nil
}

func soakRedis(t *testing.T, ttl time.Duration) *soakStore {
	// go-redis prints every failed dial while the server is down; global,
	// as for MariaDB's driver.
	redis.SetLogger(&logging.VoidLogger{})
	srv := redistest.Start(t, redistest.Config{AppendOnly: true})
	proxy := faultproxy.Start(t, srv.Addr(), faultproxy.Hooks{})
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := redisbackend.New(context.Background(), c, redisbackend.WithPrefix("soak:"), redisbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatalf("redisbackend.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	direct := srv.Client()
	return &soakStore{
		coord:   fencing.New(b, soakRequestTimeout(ttl)),
		child:   proxy.Addr(),
		kill:    func(*testing.T) { srv.Kill() },
		restart: func(*testing.T) { srv.Restart() },
		proxy:   proxy,
		conns: func(ctx context.Context) (int, error) {
			info, err := direct.Info(ctx, "clients").Result()
			if err != nil {
				return 0, err
			}
			n, err := infoField(info, "connected_clients")
			return n - 1, err // not the sampler's own
		},
		size: func(ctx context.Context) (int, error) {
			n, err := direct.DBSize(ctx).Result()
			return int(n), err
		},
	}
}

// infoField reads an integer field of a Redis INFO reply.
func infoField(info, field string) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), field+":"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", field)
}

func soakEtcd(t *testing.T, ttl time.Duration) *soakStore {
	m := etcdtest.Start(t)
	u, err := hostPort(m.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.Start(t, u, faultproxy.Hooks{})
	cli := etcdtest.NewClient(t, []string{"http://" + proxy.Addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prefix = "soak/"
	b, err := etcdbackend.New(ctx, cli, etcdbackend.WithPrefix(prefix))
	if err != nil {
		t.Fatalf("etcdbackend.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	direct := etcdtest.NewClient(t, m.Endpoints())
	port := u[strings.LastIndex(u, ":")+1:]
	return &soakStore{
		coord:   fencing.New(b, soakRequestTimeout(ttl)),
		child:   "http://" + proxy.Addr(),
		kill:    func(*testing.T) { m.Kill() },
		restart: func(t *testing.T) { soakNoErr(t, "etcd restart", m.Start()) },
		proxy:   proxy,
		conns: func(context.Context) (int, error) {
			n, err := tcpConnsTo(port)
			return n - 1, err // not the sampler's own client
		},
		size: func(ctx context.Context) (int, error) {
			r, err := direct.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return int(r.Count), nil
		},
	}
}

// hostPort returns the host:port of an http:// URL.
func hostPort(s string) (string, error) {
	hp, ok := strings.CutPrefix(s, "http://")
	if !ok {
		return "", fmt.Errorf("not an http URL: %q", s)
	}
	return hp, nil
}

func soakNoErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// tcpConnsTo counts this machine's established TCP connections (IPv4,
// loopback included) to port.
func tcpConnsTo(port string) (int, error) {
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0, err
	}
	want := fmt.Sprintf(":%04X", p)
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		// local_address rem_address st: 01 is ESTABLISHED.
		if len(f) > 3 && strings.HasSuffix(f[2], want) && f[3] == "01" {
			n++
		}
	}
	return n, nil
}

// listCount counts the keys a Coordinator lists.
func listCount(ctx context.Context, c *fencing.Coordinator) (int, error) {
	n, cursor := 0, ""
	for {
		page, next, err := c.List(ctx, "", cursor, 1000)
		if err != nil {
			return 0, err
		}
		n += len(page)
		if next == "" {
			return n, nil
		}
		cursor = next
	}
}
