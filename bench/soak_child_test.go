package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/childproc"
	"github.com/fencing-go/fencing/redisbackend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// The soak's child process: the test binary run again (see TestMain) as a
// holder in a process of its own, which the nemesis stops with SIGSTOP and
// continues with SIGCONT. Its environment names the backend, how to reach
// it (through the fault proxy) and the TTL.
const (
	soakChildEnv    = "BENCH_SOAK_CHILD" // backend name
	soakChildTarget = "BENCH_SOAK_TARGET"
	soakChildTTL    = "BENCH_SOAK_TTL"
)

// soakChildKey is the key the child holds, shared with the parent's
// traffic: while the child is stopped, a worker takes the key over.
var soakChildKey = soakKeys[1]

// soakChildMain is the child: it locks soakChildKey, prints "held TOKEN",
// then, while its lease is live, sleeps a little and prints "write TOKEN"
// (a check, a pause, then the act: a SIGSTOP in the pause makes the write
// a late one), releases and starts again. The parent makes each write
// through its guard. The child exits when its standard input closes (the
// parent ended).
func soakChildMain() int {
	ttl, err := time.ParseDuration(os.Getenv(soakChildTTL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak child:", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	coord, err := soakChildCoordinator(ctx, os.Getenv(soakChildEnv), os.Getenv(soakChildTarget), ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak child:", err)
		return 2
	}
	for ctx.Err() == nil {
		h, err := coord.Lock(ctx, soakChildKey, ttl, fencing.WithWaitTimeout(2*ttl))
		if err != nil {
			sleepCtx(ctx, ttl/4)
			continue
		}
		fmt.Printf("held %d\n", h.Token())
		for range 10 {
			if h.Context().Err() != nil {
				break
			}
			sleepCtx(ctx, ttl/10)
			fmt.Printf("write %d\n", h.Token())
		}
		_ = h.Release(context.WithoutCancel(ctx))
	}
	return 0
}

// soakChildCoordinator builds the child's Coordinator on the parent's store.
func soakChildCoordinator(ctx context.Context, name, target string, ttl time.Duration) (*fencing.Coordinator, error) {
	// Quiet drivers, as in the parent (see soakMariaDB).
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	redis.SetLogger(&logging.VoidLogger{})
	var b backend.Backend
	var err error
	switch name {
	case "sqlite", "postgres", "mariadb":
		driver, d := map[string]string{"sqlite": "sqlite", "postgres": "pgx", "mariadb": "mysql"}[name],
			map[string]sqlbackend.Dialect{"sqlite": sqlbackend.SQLite, "postgres": sqlbackend.Postgres, "mariadb": sqlbackend.MySQL}[name]
		db, oerr := sql.Open(driver, target)
		if oerr != nil {
			return nil, oerr
		}
		b, err = newSQLBackend(db, d, "soak_")
	case "redis":
		b, err = redisbackend.New(ctx, redis.NewClient(&redis.Options{Addr: target, ContextTimeoutEnabled: true}),
			redisbackend.WithPrefix("soak:"), redisbackend.WithSafetyCheck(backend.CheckSkip))
	case "etcd":
		cli, cerr := clientv3.New(clientv3.Config{Endpoints: []string{target}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if cerr != nil {
			return nil, cerr
		}
		nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		b, err = etcdbackend.New(nctx, cli, etcdbackend.WithPrefix("soak/"))
	case "kube":
		b, err = soakKubeChild(ctx, target)
	default:
		return nil, fmt.Errorf("no soak child for backend %q", name)
	}
	if err != nil {
		return nil, err
	}
	return fencing.New(b, soakRequestTimeout(ttl)), nil
}

// soakChild is the parent's side of the child process.
type soakChild struct {
	h  *childproc.Helper
	tr *soakTraffic
	// grants counts the child's grants; late its writes read after a
	// SIGSTOP with the token it held when stopped (or an older one).
	grants, late atomic.Int64
	// lastToken is the child's last grant's token, stopAt lastToken at the
	// last SIGSTOP.
	lastToken, stopAt atomic.Uint64
}

// startSoakChild starts the child on the store named name, reached at
// target; it is killed when t ends.
func startSoakChild(t *testing.T, tr *soakTraffic, name, target string) *soakChild {
	h := childproc.StartTestBinary(t, []string{"-test.run=^$"},
		soakChildEnv+"="+name, soakChildTarget+"="+target, soakChildTTL+"="+tr.ttl.String())
	return &soakChild{h: h, tr: tr}
}

// run reads the child's lines until it closes its output or ctx ends,
// checking its grants and making its writes through the guard.
func (c *soakChild) run(ctx context.Context) {
	for {
		var line string
		var ok bool
		select {
		case line, ok = <-c.h.Lines():
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		token, err := strconv.ParseUint(arg, 10, 64)
		if err != nil {
			continue // not a line of the protocol
		}
		switch verb {
		case "held":
			c.grants.Add(1)
			c.tr.check.childGrant(soakChildKey, c.lastToken.Load(), token)
			c.lastToken.Store(token)
		case "write":
			if s := c.stopAt.Load(); s != 0 && token <= s {
				c.late.Add(1)
			}
			if err := c.tr.write(ctx, "child", soakChildKey, token); err != nil && ctx.Err() == nil {
				c.tr.count("child", err)
			}
		}
	}
}

// freeze stops the child with SIGSTOP for d, then continues it.
func (c *soakChild) freeze(ctx context.Context, d time.Duration) error {
	if err := c.h.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	c.stopAt.Store(c.lastToken.Load())
	c.tr.check.event("child stopped (SIGSTOP), its last token %d", c.lastToken.Load())
	sleepCtx(ctx, d)
	c.tr.check.event("child continued (SIGCONT)")
	return c.h.Cmd.Process.Signal(syscall.SIGCONT)
}
