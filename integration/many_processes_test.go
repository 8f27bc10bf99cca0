package integration_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// LockMany across processes: the test binary runs again as worker
// processes (TestLockManyHelperWorker) on one store, each with connections
// of its own. Each locks overlapping sets of keys in random orders, half of
// them in the keys' lines (WithFIFO) where the store has them, and writes
// down every hold: key, token, and when it began and ended on the host's
// wall clock, which the processes share. The parent then checks that every
// worker finished (no deadlock), that no key was held by two workers at
// once and that each key's tokens strictly increase in the order of its
// holds.

const (
	manyHelperStore = "FENCING_MANY_HELPER_STORE" // a store, as storeBackend reads it
	manyHelperOut   = "FENCING_MANY_HELPER_OUT"   // the file a worker writes its holds to
	manyHelperSeed  = "FENCING_MANY_HELPER_SEED"
	manyHelperTTL   = "FENCING_MANY_HELPER_TTL"
)

var manyProcKeys = []string{"ov/a", "ov/b", "ov/c", "ov/d"}

const manyProcWorkers, manyProcRounds = 4, 6

// TestLockManyHelperWorker is a worker's process: it does its rounds and
// writes a line per key held, "key token calledNs beganNs endedNs lost":
// when LockMany was called, when it returned and when the worker stopped
// using the key; and a line "! error" for a Release that failed.
func TestLockManyHelperWorker(t *testing.T) {
	spec := os.Getenv(manyHelperStore)
	if spec == "" {
		return // not a worker: TestLockManyAcrossProcesses starts them
	}
	seed, err := strconv.ParseUint(os.Getenv(manyHelperSeed), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := time.ParseDuration(os.Getenv(manyHelperTTL))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(os.Getenv(manyHelperOut))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	b := storeBackend(t, spec)
	c := fencing.New(b)
	opts := []fencing.LockOption{fencing.WithMargin(ttl / 2)}
	if _, ok := b.(backend.Queuer); ok && seed%2 == 0 {
		opts = append(opts, fencing.WithFIFO())
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	ctx := context.Background()
	for range manyProcRounds {
		perm := rng.Perm(len(manyProcKeys))[:2+rng.IntN(2)]
		keys := make([]string, len(perm))
		for i, k := range perm {
			keys[i] = manyProcKeys[k]
		}
		called := time.Now()
		m, err := c.LockMany(ctx, keys, ttl, opts...)
		if err != nil {
			t.Fatalf("LockMany(%q): %v", keys, err)
		}
		began := time.Now()
		time.Sleep(time.Duration(10+rng.IntN(20)) * time.Millisecond) // long enough for the others to wait
		ended := time.Now()
		// Held until ended, unless its Context ended first (a lease lost:
		// the store may have let another worker take it).
		lost := m.Context().Err() != nil
		for _, l := range m.Leases() {
			fmt.Fprintf(out, "%s %d %d %d %d %v\n", l.Key, l.Token, called.UnixNano(), began.UnixNano(), ended.UnixNano(), lost)
		}
		if err := m.Release(ctx); err != nil && !errors.Is(err, fencing.ErrLeaseLost) { // lost after ended: no matter
			fmt.Fprintf(out, "! Release(%q): %q\n", keys, err.Error()) // one line; the parent reports it after the holds
		}
	}
	if err := out.Sync(); err != nil {
		t.Fatal(err)
	}
}

// manyHold is one key's hold by a worker.
type manyHold struct {
	worker       int
	key          string
	token        uint64
	called       time.Time // LockMany called
	began, ended time.Time
	lost         bool
}

// TestLockManyAcrossProcesses runs the workers above on every store that
// processes can share.
func TestLockManyAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts servers and processes")
	}
	t.Run("memory", func(t *testing.T) {
		t.Skip("harness capability: the memory backend's keys live in one process, which no other process can reach")
	})
	for _, s := range []processStore{sqliteStore, postgresStore, mysqlStore, redisStore, etcdStore} {
		t.Run(s.name, func(t *testing.T) {
			w, spec := s.open(t)
			if _, ok := w.NewBackend(t).(backend.MultiGranter); !ok {
				t.Fatalf("the %s backend does not implement backend.MultiGranter", w.Name)
			}
			holds, errs := runManyWorkers(t, spec, w.TTL)
			checkManyHolds(t, holds)
			for _, e := range errs {
				t.Error(e)
			}
		})
	}
}

// runManyWorkers runs the workers on spec's store with leases of ttl, waits
// for them to finish, and returns their holds and the errors they wrote. A worker stuck in a
// deadlock is stopped (with SIGQUIT, which prints its goroutines) when the
// test's own deadline (go test -timeout) is near.
func runManyWorkers(t *testing.T, spec string, ttl time.Duration) ([]manyHold, []string) {
	dir := t.TempDir()
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Until(d)/20))
		defer cancel()
	}
	cmds := make([]*exec.Cmd, manyProcWorkers)
	started := time.Now()
	for i := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLockManyHelperWorker$", "-test.count=1")
		cmd.Env = append(os.Environ(), manyHelperStore+"="+spec, manyHelperOut+"="+filepath.Join(dir, strconv.Itoa(i)),
			manyHelperSeed+"="+strconv.Itoa(i), manyHelperTTL+"="+ttl.String())
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %d: %v (after %v)", i, err, time.Since(started))
		}
	}
	if ctx.Err() != nil {
		t.Errorf("workers still running at the test's deadline: a deadlock (their goroutines are above)")
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d workers of %d rounds each finished in %v", manyProcWorkers, manyProcRounds, time.Since(started))
	var holds []manyHold
	var errs []string
	for i := range cmds {
		f, err := os.Open(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if e, ok := strings.CutPrefix(sc.Text(), "! "); ok {
				errs = append(errs, fmt.Sprintf("worker %d: %s", i, e))
				continue
			}
			h := manyHold{worker: i}
			var called, began, ended int64
			if _, err := fmt.Sscanf(sc.Text(), "%s %d %d %d %d %t", &h.key, &h.token, &called, &began, &ended, &h.lost); err != nil {
				t.Fatalf("worker %d's line %q: %v", i, sc.Text(), err)
			}
			h.called, h.began, h.ended = time.Unix(0, called), time.Unix(0, began), time.Unix(0, ended)
			holds = append(holds, h)
		}
		f.Close()
	}
	return holds, errs
}

// checkManyHolds fails unless, on every key, the tokens strictly increase
// and each hold that was not lost ended before every hold with a larger
// token began: no key held twice, tokens in the order of the holds. It
// fails too when no worker had to wait for a key another held (the
// workers did not contend).
func checkManyHolds(t *testing.T, holds []manyHold) {
	byKey := make(map[string][]manyHold)
	lost, waited := 0, 0
	for _, h := range holds {
		byKey[h.key] = append(byKey[h.key], h)
		if h.lost {
			lost++
		}
	}
	if len(byKey) != len(manyProcKeys) {
		t.Fatalf("holds on %d keys, want all %d", len(byKey), len(manyProcKeys))
	}
	for key, hs := range byKey {
		slices.SortFunc(hs, func(a, b manyHold) int { return cmp.Compare(a.token, b.token) })
		for i, a := range hs {
			if i > 0 && a.token == hs[i-1].token {
				t.Errorf("key %q: token %d given to worker %d and worker %d", key, a.token, hs[i-1].worker, a.worker)
			}
			if a.lost {
				continue
			}
			for _, b := range hs[i+1:] {
				if b.called.Before(a.ended) && b.worker != a.worker {
					waited++ // b asked while a held the key
				}
				if b.began.Before(a.ended) {
					t.Errorf("key %q: worker %d held token %d until %v, but worker %d held token %d from %v, %v earlier",
						key, a.worker, a.token, a.ended.Format(time.StampMicro), b.worker, b.token, b.began.Format(time.StampMicro), a.ended.Sub(b.began))
				}
			}
		}
	}
	t.Logf("%d holds on %d keys, %d of them lost before their end; %d asked for a key while another worker held it", len(holds), len(byKey), lost, waited)
	if waited == 0 {
		t.Fatal("no worker asked for a key while another held it: the workers did not contend")
	}
}
