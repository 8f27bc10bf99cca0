package bench

import (
	"context"
	cryptorand "crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
)

// redisSection compares the Redis backend, called through
// fencing.Coordinator, with bsm/redislock, go-redsync/redsync and PING on
// the package's redis-server (see TestMain), at 1 and 32 goroutines, and
// times lock handoffs. Server CPU per operation is the server's own time
// for the commands each contender sends, from INFO commandstats (see
// commandCPU), which does not depend on how busy the client is.
//
// BENCH_SPIN=1 keeps every vCPU busy for the section with a spinning
// process at nice 19 per core (started and killed here): an idle vCPU of a
// VM halts, and waking it makes a loopback round trip several times
// longer.
func redisSection(t *testing.T, r *report) {
	rc := newClient(t)
	ctx := context.Background()
	r.notes = append(r.notes, spin(t))
	stats := func(cmds ...string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return commandCPU(ctx, rc, cmds) }
	}
	ours := stats("evalsha", "eval", "hmget", "time") // Token outside Cluster: HMGET, TIME
	lockCmds := stats("set", "evalsha", "eval")       // redislock, redsync: SET NX PX, a script
	refreshCmds := stats("evalsha", "eval")           // redislock's Refresh is one script
	pingCmds := stats("ping")
	coord := newCoordinator(t, rc, "bench:report:")
	locker := redislock.New(rc)
	rs := redsync.New(redsyncgoredis.NewPool(rc))
	run := "bench:report:" + cryptorand.Text() + ":"

	// Grant+Release on the client above (ContextTimeoutEnabled) and on one
	// with go-redis's defaults, each against redislock on the same client.
	dc := newDefaultClient(t)
	clients := []struct {
		op     string
		client *redis.Client
		coord  *fencing.Coordinator
		locker *redislock.Client
	}{
		{"Grant+Release", rc, coord, locker},
		{"Grant+Release, default client", dc, newCoordinator(t, dc, "bench:report:"), redislock.New(dc)},
	}
	for _, cl := range clients {
		for _, g := range []int{1, 32} {
			keys := disjointKeys(g, 1)
			c := &comparison{
				store: "redis", op: cl.op, goroutines: g,
				contenders: []contender{
					{name: "ours", serverCPU: ours, worker: grantReleaseWorker(cl.coord, keys)},
					{name: "redislock Obtain+Release", serverCPU: lockCmds, worker: func(w int) func(int) error {
						key := run + "redislock:" + keys[w][0]
						return func(int) error {
							l, err := cl.locker.Obtain(ctx, key, leaseTTL, nil)
							if err != nil {
								return err
							}
							return l.Release(ctx)
						}
					}},
					{name: "redsync Lock+Unlock", serverCPU: lockCmds, worker: func(w int) func(int) error {
						key := run + "redsync:" + keys[w][0]
						return func(int) error {
							m := rs.NewMutex(key, redsync.WithExpiry(leaseTTL), redsync.WithTries(1))
							if err := m.LockContext(ctx); err != nil {
								return err
							}
							_, err := m.UnlockContext(ctx)
							return err
						}
					}},
					{name: "2 PINGs", serverCPU: pingCmds, worker: func(int) func(int) error {
						return func(int) error {
							if err := cl.client.Ping(ctx).Err(); err != nil {
								return err
							}
							return cl.client.Ping(ctx).Err()
						}
					}},
				},
			}
			if cl.client != rc {
				c.contenders = slices.Delete(c.contenders, 2, 3) // redsync: on the first client only
			}
			r.compare(t, c)
		}
	}

	for _, g := range []int{1, 32} {
		keys := disjointKeys(g, 1)
		leases := make([]fencing.Lease, g)
		locks := make([]*redislock.Lock, g)
		for w := range g {
			var err error
			if leases[w], err = coord.Grant(ctx, fmt.Sprintf("renew/%d/%s", g, keys[w][0]), leaseTTL); err != nil {
				t.Fatal(err)
			}
			if locks[w], err = locker.Obtain(ctx, fmt.Sprintf("%srefresh:%d:%s", run, g, keys[w][0]), leaseTTL, nil); err != nil {
				t.Fatal(err)
			}
		}
		c := &comparison{
			store: "redis", op: "Renew", goroutines: g,
			contenders: []contender{
				{name: "ours", serverCPU: ours, worker: func(w int) func(int) error {
					l := leases[w]
					return func(int) error {
						_, err := coord.Renew(ctx, l.Key, l.ID, leaseTTL)
						return err
					}
				}},
				{name: "redislock Refresh", serverCPU: refreshCmds, worker: func(w int) func(int) error {
					l := locks[w]
					return func(int) error { return l.Refresh(ctx, leaseTTL, nil) }
				}},
				{name: "PING", serverCPU: pingCmds, worker: func(int) func(int) error {
					return func(int) error { return rc.Ping(ctx).Err() }
				}},
			},
		}
		r.compare(t, c)
	}

	for _, g := range []int{1, 32} {
		held, err := coord.Grant(ctx, fmt.Sprintf("checked/%d", g), leaseTTL)
		if err != nil {
			t.Fatal(err)
		}
		c := &comparison{
			store: "redis", op: "CheckToken", goroutines: g,
			contenders: []contender{
				{name: "ours", serverCPU: ours, worker: func(int) func(int) error {
					return func(int) error {
						ok, err := coord.CheckToken(ctx, held.Key, held.Token)
						if err == nil && !ok {
							err = fmt.Errorf("token %d checked false", held.Token)
						}
						return err
					}
				}},
				{name: "PING", serverCPU: pingCmds, worker: func(int) func(int) error {
					return func(int) error { return rc.Ping(ctx).Err() }
				}},
			},
		}
		r.compare(t, c)
	}

	r.notes = append(r.notes, handoffTable(t, r.rounds*100))
}

// commandCPU returns the server's time so far in the commands cmds (usec
// of INFO commandstats, summed). A script's time includes the commands it
// calls, so only commands a client sends are named: a sum over every
// command would count a script's calls twice.
func commandCPU(ctx context.Context, c *redis.Client, cmds []string) (time.Duration, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	var total time.Duration
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found || !contains(cmds, name) {
			continue
		}
		for f := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO commandstats: %s: %w", line, err)
				}
				total += time.Duration(us) * time.Microsecond
			}
		}
	}
	return total, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// spin keeps every vCPU busy with a spinning shell at nice 19 when
// BENCH_SPIN=1, until t's cleanup kills them by their PIDs, and returns the
// report's note on the vCPUs' state.
func spin(t *testing.T) string {
	if os.Getenv("BENCH_SPIN") != "1" {
		return "Redis section: vCPUs left as they were (BENCH_SPIN unset): idle vCPUs halt, and a loopback round trip then waits for their wake-ups."
	}
	n := runtime.NumCPU()
	for range n {
		cmd := exec.Command("nice", "-n", "19", "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a spinner: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	return fmt.Sprintf("Redis section: vCPUs kept busy (BENCH_SPIN=1: %d spinning processes at nice 19, one per vCPU, killed after).", n)
}

// handoffTable times rounds lock handoffs, shuffled each round as
// BenchmarkHandoff does (see there), and returns a Markdown table of the
// medians in µs and their ratios to PING.
func handoffTable(t *testing.T, rounds int) string {
	ops := handoffOps(t)
	medians := handoffMedians(t, ops, countdown(rounds))
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nLock handoff on Redis, from the holder's release returning to the waiter's lock call returning (%d shuffled rounds, medians; see BenchmarkHandoff):\n\n", rounds)
	sb.WriteString("| round | µs | in PINGs |\n|---|---:|---:|\n")
	for _, op := range ops {
		fmt.Fprintf(&sb, "| %s | %.1f | %.2f |\n", op.name, medians[op.name], medians[op.name]/medians["ping"])
	}
	return sb.String()
}
