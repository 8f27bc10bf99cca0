package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
	"github.com/fencing-go/fencing/redisbackend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// hold --wait --fifo on shared servers: three holds in three processes,
// the second and third joining the line while the first holds the key, get
// it in the order they began to wait, with increasing tokens.
func TestHoldWaitFIFO(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		dir := t.TempDir()
		// Each command prints its token and holds the key until its file
		// appears.
		hold := func(name string) *proc {
			f := filepath.Join(dir, name)
			p := start(t, s.args("hold", "fifo", "--ttl", "2s", "--wait", "--fifo", "--",
				"sh", "-c", `echo "$FENCING_TOKEN"; while [ ! -e `+f+` ]; do sleep 0.02; done`)...)
			// Should the test fail first, the command ends before the
			// process is killed and waited for (cleanups run last first).
			t.Cleanup(func() { os.WriteFile(f, nil, 0o600) })
			return p
		}
		release := func(name string) {
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		token := func(p *proc) uint64 {
			t.Helper()
			n, err := strconv.ParseUint(p.line(30*time.Second), 10, 64)
			if err != nil {
				t.Fatalf("the command printed no token: %v", err)
			}
			return n
		}
		first := hold("first")
		t1 := token(first)
		// joined waits until the store's line holds n waiters.
		q := lineReader(t, s)
		joined := func(n int) {
			for deadline := time.Now().Add(30 * time.Second); inLine(t, q, "fifo") != n; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the line never held %d waiters", s.name, n)
				}
			}
		}
		joined(0) // the first hold has left the line it passed through
		second := hold("second")
		joined(1)
		third := hold("third")
		joined(2)
		release("first")
		if code := first.wait(30 * time.Second); code != 0 {
			t.Fatalf("the first hold exited %d; stderr:\n%s", code, first.errb.String())
		}
		t2 := token(second)
		release("second")
		t3 := token(third)
		release("third")
		for _, p := range []*proc{second, third} {
			if code := p.wait(30 * time.Second); code != 0 {
				t.Fatalf("hold exited %d; stderr:\n%s", code, p.errb.String())
			}
		}
		if !(t1 < t2 && t2 < t3) {
			t.Fatalf("tokens %d, %d, %d: want the holds granted in the order they began to wait", t1, t2, t3)
		}
	})
}

// --fifo without --wait is a usage error.
func TestHoldFIFONeedsWait(t *testing.T) {
	r := runBin(t, "hold", "k", "--ttl", "1s", "--fifo", "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--fifo goes with --wait") {
		t.Fatalf("hold --fifo without --wait: want exit 2 and a usage message, got %v", r)
	}
}

// lineReader returns a backend on s's store, with the commands' key prefix,
// to read its lines.
func lineReader(t *testing.T, s server) backend.Queuer {
	t.Helper()
	var b backend.Backend
	switch s.name {
	case "etcd":
		b = recipetest.EtcdBackend(t, []string{s.flags[1]}, etcdbackend.DefaultPrefix)
	case "redis":
		b = recipetest.RedisBackend(t, s.flags[1], redisbackend.DefaultPrefix)
	case "sqlite":
		b = recipetest.SQLBackend(t, "sqlite", "file:"+s.flags[1]+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)", sqlbackend.SQLite, "", false)
	default:
		t.Fatalf("no line reader for %s", s.name)
	}
	return b.(backend.Queuer)
}

// inLine returns how many waiters are in key's line: the number ahead of a
// probe that joins the line's end and leaves at once.
func inLine(t *testing.T, q backend.Queuer, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := q.Enqueue(ctx, key, "probe", 5*time.Second)
	if err != nil {
		t.Fatalf("probe: Enqueue: %v", err)
	}
	if err := q.Dequeue(ctx, key, "probe"); err != nil {
		t.Fatalf("probe: Dequeue: %v", err)
	}
	return p.Ahead
}
