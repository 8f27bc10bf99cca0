package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/childproc"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// A waiter killed with SIGKILL in the middle of the line: the test binary
// runs again as the waiter (TestFIFOHelperWaiter), joins, and is killed; the
// waiter behind it gets the key within the entry's TTL and the store's
// slack.

const (
	helperStore = "FENCING_FIFO_HELPER_STORE" // "sqlite|dsn", "postgres|dsn|prefix", "mysql|dsn|prefix", "redis|addr|prefix", "etcd|endpoint|prefix"
	helperKey   = "FENCING_FIFO_HELPER_KEY"
	helperTTL   = "FENCING_FIFO_HELPER_TTL"
)

// storeBackend opens the store that spec names, as a new process would.
func storeBackend(t *testing.T, spec string) backend.Backend {
	f := strings.Split(spec, "|")
	switch f[0] {
	case "sqlite":
		return recipetest.SQLBackend(t, "sqlite", f[1], sqlbackend.SQLite, "", false)
	case "postgres":
		return recipetest.SQLBackend(t, "pgx", f[1], sqlbackend.Postgres, f[2], false,
			sqlbackend.WithSafetyCheck(backend.CheckSkip), sqlbackend.WithListener(f[1]))
	case "mysql":
		return recipetest.SQLBackend(t, "mysql", f[1], sqlbackend.MySQL, f[2], false)
	case "redis":
		return recipetest.RedisBackend(t, f[1], f[2])
	case "etcd":
		return recipetest.EtcdBackend(t, []string{f[1]}, f[2])
	}
	t.Fatalf("unknown store %q", spec)
	return nil
}

// TestFIFOHelperWaiter is the killed waiter's process: it joins the line,
// says so on stdout, and waits to be killed.
func TestFIFOHelperWaiter(t *testing.T) {
	spec := os.Getenv(helperStore)
	if spec == "" {
		return // not the helper process: TestLockFIFOKilledWaiter starts it
	}
	ttl, err := time.ParseDuration(os.Getenv(helperTTL))
	if err != nil {
		t.Fatal(err)
	}
	p := &procs{joins: make(chan join, 1)}
	inner := storeBackend(t, spec)
	b := &watched{Backend: inner, q: inner.(backend.Queuer), grants: &p.grants, joins: p.joins, seen: map[string]bool{}}
	c := fencing.New(b)
	go func() {
		j := <-p.joins
		fmt.Printf("joined %d\n", j.place.Ahead)
	}()
	h, err := c.Lock(context.Background(), os.Getenv(helperKey), ttl, fencing.WithFIFO())
	if err != nil {
		fmt.Printf("error %v\n", err)
		return
	}
	fmt.Printf("granted %d\n", h.Token())
	select {} // until killed
}

// sqliteFile is a SQLite world whose file the helper process can open.
func sqliteFile(t *testing.T) (recipetest.World, string) {
	dsn := "file:" + filepath.Join(t.TempDir(), "fifo.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	recipetest.SQLBackend(t, "sqlite", dsn, sqlbackend.SQLite, "", true)
	return recipetest.World{Name: "sqlite", TTL: time.Second, Margin: 500 * time.Millisecond,
		NewBackend: func(t *testing.T) backend.Backend {
			return recipetest.SQLBackend(t, "sqlite", dsn, sqlbackend.SQLite, "", false)
		}}, "sqlite|" + dsn
}

// processStore is a store of its own for a test, which other processes
// reach through spec (see storeBackend).
type processStore struct {
	name string
	open func(t *testing.T) (w recipetest.World, spec string)
}

var (
	sqliteStore   = processStore{"sqlite", sqliteFile}
	postgresStore = processStore{"postgres", func(t *testing.T) (recipetest.World, string) {
		w := recipetest.Postgres(t)
		return w, "postgres|" + w.DSN + "|" + w.Prefix
	}}
	mysqlStore = processStore{"mysql", func(t *testing.T) (recipetest.World, string) {
		w := recipetest.MySQL(t)
		return w, "mysql|" + w.DSN + "|" + w.Prefix
	}}
	redisStore = processStore{"redis", func(t *testing.T) (recipetest.World, string) {
		w := recipetest.Redis(t)
		return w, "redis|" + w.Redis.Addr() + "|" + w.Prefix
	}}
	etcdStore = processStore{"etcd", func(t *testing.T) (recipetest.World, string) {
		w := recipetest.Etcd(t)
		return w, "etcd|" + w.Etcd.Endpoints()[0] + "|" + w.Prefix
	}}
)

// TestLockFIFOKilledWaiter: the waiter behind one killed with SIGKILL gets
// the key within the killed one's entry TTL and the store's slack.
func TestLockFIFOKilledWaiter(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts servers and processes")
	}
	for _, s := range []processStore{sqliteStore, redisStore, etcdStore} {
		t.Run(s.name, func(t *testing.T) {
			w, spec := s.open(t)
			if _, ok := w.NewBackend(t).(backend.Queuer); !ok {
				t.Fatalf("the %s backend does not implement backend.Queuer", w.Name)
			}
			p := newProcs(t, w, 4)
			const key = "fifo-killed"
			after, afterKill := deadWaiter(t, p, key, func(context.Context) func() {
				child, said := startWaiter(t, spec, key, w.TTL)
				if said != "joined 1" {
					t.Fatalf("the helper waiter said %q, want \"joined 1\"", said)
				}
				return func() {
					child.Process.Signal(syscall.SIGKILL)
					child.Wait()
				}
			})
			t.Logf("%s: a waiter killed with SIGKILL delayed the next by %v after the release before it (%v after the kill; entry TTL %v)",
				w.Name, after, afterKill, w.TTL)
			if bound := w.TTL + expirySlack(w); afterKill > bound {
				t.Fatalf("the next waiter got the key %v after the kill, want at most the entry's TTL and slack, %v", afterKill, bound)
			}
		})
	}
}

// startWaiter runs the helper waiter on spec's store and returns once it
// has said something: "joined <Ahead>" once it is in key's line.
func startWaiter(t *testing.T, spec, key string, ttl time.Duration) (*exec.Cmd, string) {
	child := childproc.StartHelper(t, "TestFIFOHelperWaiter", helperStore+"="+spec, helperKey+"="+key, helperTTL+"="+ttl.String())
	return child.Cmd, child.Next(t, 60*time.Second)
}
