package integration_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/childproc"
	"github.com/fencing-go/fencing/rwlock"
)

// The read-write lock across processes: the test binary runs again as
// worker processes (TestRWLockHelperWorker) on one store, each with
// goroutines that read and write one rwlock.RWLock and write down every
// hold when it begins and when it ends: kind, token, the host's wall clock
// (which the processes share) and the holder's Deadline (its Context's). The
// parent stops workers with SIGSTOP in the middle of a hold, past their
// leases' end, and kills one with SIGKILL in the middle of a hold; then it
// checks the holds: a writer's never overlaps another hold, readers were
// inside together, writers' tokens increase in the order of their holds,
// and a reader's token lies between the writers before and after it. A hold
// counts from when its holder saw it begin to when it ended or its Deadline
// passed, whichever came first: a stopped holder's lease ends at its
// Deadline, and one killed ends there too.

const (
	rwHelperStore = "FENCING_RW_HELPER_STORE" // a store, as storeBackend reads it
	rwHelperOut   = "FENCING_RW_HELPER_OUT"   // the file a worker writes its holds to
	rwHelperSeed  = "FENCING_RW_HELPER_SEED"
	rwHelperTTL   = "FENCING_RW_HELPER_TTL"
	rwHelperUntil = "FENCING_RW_HELPER_UNTIL" // Unix nanoseconds: when workers stop taking the lock
)

const (
	rwProcWorkers    = 4 // processes
	rwProcGoroutines = 3 // holders in each
	rwProcReaders    = 3 // the lock's reader slots
)

// TestRWLockHelperWorker is a worker's process. Each goroutine takes the
// lock, for writing one time in three, until the time in rwHelperUntil,
// and writes a line when a hold begins, "B id kind token beganNs
// deadlineNs", and one when it ends, "E id endedNs deadlineNs"; "! error"
// for an error before that time. It says "done" on stdout at the end.
func TestRWLockHelperWorker(t *testing.T) {
	spec := os.Getenv(rwHelperStore)
	if spec == "" {
		return // not a worker: TestRWLockAcrossProcesses starts them
	}
	seed, err := strconv.ParseUint(os.Getenv(rwHelperSeed), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := time.ParseDuration(os.Getenv(rwHelperTTL))
	if err != nil {
		t.Fatal(err)
	}
	untilNs, err := strconv.ParseInt(os.Getenv(rwHelperUntil), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Unix(0, untilNs)
	out, err := os.OpenFile(os.Getenv(rwHelperOut), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var mu sync.Mutex
	write := func(format string, args ...any) { // one write(2) per line: a killed worker leaves whole lines
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	l, err := rwlock.New(fencing.New(storeBackend(t, spec)), "rw-procs", rwlock.WithReaders(rwProcReaders))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	var wg sync.WaitGroup
	for g := range rwProcGoroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for n := 0; ctx.Err() == nil; n++ {
				id := fmt.Sprintf("%d.%d.%d", seed, g, n)
				kind := "r"
				var hold interface {
					Token() uint64
					Context() context.Context
					Release(context.Context) error
				}
				var err error
				if rng.IntN(3) == 0 {
					kind = "w"
					hold, err = l.Lock(ctx, ttl)
				} else {
					hold, err = l.RLock(ctx, ttl)
				}
				if err != nil {
					if ctx.Err() == nil {
						write("! %s: %q", id, err.Error())
					}
					return
				}
				deadline := func() int64 {
					d, ok := hold.Context().Deadline()
					if !ok {
						t.Errorf("%s: the holder's context has no Deadline", id)
					}
					return d.UnixNano()
				}
				write("B %s %s %d %d %d", id, kind, hold.Token(), time.Now().UnixNano(), deadline())
				time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
				write("E %s %d %d", id, time.Now().UnixNano(), deadline())
				// ctx bounds the hold too: its end is no error.
				if err := hold.Release(context.Background()); err != nil && !errors.Is(err, fencing.ErrLeaseLost) && ctx.Err() == nil {
					write("! %s: Release: %q", id, err.Error())
				}
			}
		})
	}
	wg.Wait()
	if err := out.Sync(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("done")
}

// rwHold is one hold by a worker, as its holder saw it.
type rwHold struct {
	id     string
	writer bool
	token  uint64
	began  time.Time
	ended  time.Time // the zero time: never ended (killed)
	dl     time.Time // the Deadline when it began, or when it ended if it did
}

// end is when the hold ended: when its holder saw it end, or its Deadline,
// whichever came first.
func (h rwHold) end() time.Time {
	if h.ended.IsZero() || h.dl.Before(h.ended) {
		return h.dl
	}
	return h.ended
}

// live reports whether the hold lasted at all: a holder stopped between its
// grant and the hold's beginning sees its Deadline already passed.
func (h rwHold) live() bool { return h.began.Before(h.end()) }

func (h rwHold) String() string {
	kind := "reader"
	if h.writer {
		kind = "writer"
	}
	return fmt.Sprintf("%s %s (token %d, %s to %s)", kind, h.id, h.token, h.began.Format(time.StampMicro), h.end().Format(time.StampMicro))
}

// readRWHolds reads a worker's file: its holds, and the ids of those that
// had begun and not ended when it was read, and the errors it wrote.
func readRWHolds(t *testing.T, file string) (holds []rwHold, open []string, errs []string) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := make(map[string]int)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "! "); ok {
			errs = append(errs, e)
			continue
		}
		var id, kind string
		var token uint64
		var began, ended, dl int64
		if _, err := fmt.Sscanf(line, "B %s %s %d %d %d", &id, &kind, &token, &began, &dl); err == nil {
			at[id] = len(holds)
			holds = append(holds, rwHold{id: id, writer: kind == "w", token: token, began: time.Unix(0, began), dl: time.Unix(0, dl)})
			continue
		}
		if _, err := fmt.Sscanf(line, "E %s %d %d", &id, &ended, &dl); err != nil {
			t.Fatalf("%s: line %q: %v", file, line, err)
		}
		i, ok := at[id]
		if !ok {
			t.Fatalf("%s: line %q ends a hold that did not begin", file, line)
		}
		holds[i].ended, holds[i].dl = time.Unix(0, ended), time.Unix(0, dl)
	}
	for _, h := range holds {
		if h.ended.IsZero() {
			open = append(open, h.id)
		}
	}
	return holds, open, errs
}

// TestRWLockAcrossProcesses runs the workers above on the stores that
// processes can share, with a worker stopped twice and one killed, each in
// the middle of a hold.
//
// On SQLite a worker stopped in the middle of a transaction keeps the
// file's write lock (an fcntl lock on the -shm file) until it is continued:
// every process's writes, renewals and grants included, wait for it. Under
// -race that is the common case: modernc's SQLite is Go code the race
// detector instruments, so a transaction holds the lock about 7 ms (0.3 ms
// of statements and 0.7 ms of commit without -race, 4 ms and 2-3 ms with
// it), and the four workers keep it about three quarters of the time; 7 of
// 9 stopped workers held it (/proc/locks: WRITE at offset 120 of the -shm
// file). Behind a frozen file SQLite keeps no line: the processes' BEGIN
// IMMEDIATEs retry in its busy handler (sleeps of up to 100 ms), and one
// waited 8.9 s. So on SQLite a stop counts one expiry more in
// the bound for the others going on, and the workers run 6 expiries longer:
// at load 13-24 on 2 cores, the workers took up to 9.5 s to begin 10 holds
// and the first hold after a fault began up to 2.7 s after it (4.5 s with
// no busy_timeout in the connection string) (docs/rwlock.md).
func TestRWLockAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts servers and processes")
	}
	for _, s := range []processStore{sqliteStore, postgresStore, mysqlStore, redisStore, etcdStore} {
		t.Run(s.name, func(t *testing.T) {
			w, spec := s.open(t)
			dir := t.TempDir()
			expiry := w.TTL + w.Margin + expirySlack(w) // a stopped holder's leases have ended by then
			bound := 2 * expiry                         // the others go on within it after a fault
			run := 4*expiry + 8*time.Second
			if s.name == "sqlite" {
				bound += expiry   // the stop may freeze the file (see above)
				run += 6 * expiry // slow starts and the waits behind a frozen file
			}
			until := time.Now().Add(run)
			workers := make([]*childproc.Helper, rwProcWorkers)
			files := make([]string, rwProcWorkers)
			for i := range workers {
				files[i] = filepath.Join(dir, strconv.Itoa(i))
				workers[i] = childproc.StartHelper(t, "TestRWLockHelperWorker", rwHelperStore+"="+spec, rwHelperOut+"="+files[i],
					rwHelperSeed+"="+strconv.Itoa(i), rwHelperTTL+"="+w.TTL.String(), rwHelperUntil+"="+strconv.FormatInt(until.UnixNano(), 10))
			}
			// stopMidHold stops with SIGSTOP a worker not in skip once it
			// is in the middle of a hold, and returns it and the ids of
			// its open holds.
			stopMidHold := func(skip ...int) (int, []string) {
				for time.Now().Before(until.Add(-bound)) {
					for i := range workers {
						if slices.Contains(skip, i) {
							continue
						}
						if _, open, _ := readRWHolds(t, files[i]); len(open) > 0 {
							p := workers[i].Cmd.Process
							if err := p.Signal(syscall.SIGSTOP); err != nil {
								t.Fatal(err)
							}
							if _, open, _ := readRWHolds(t, files[i]); len(open) > 0 {
								return i, open
							}
							_ = p.Signal(syscall.SIGCONT) // it ended them meanwhile
						}
					}
					time.Sleep(time.Millisecond)
				}
				t.Fatalf("no worker seen in the middle of a hold")
				return 0, nil
			}
			var stopped []time.Time // when each fault began
			for begun := 0; begun < 10 && time.Now().Before(until.Add(-bound)); time.Sleep(10 * time.Millisecond) {
				begun = 0 // the workers start and contend
				for _, f := range files {
					hs, _, _ := readRWHolds(t, f)
					begun += len(hs)
				}
			}
			t.Logf("the workers began 10 holds in %v", time.Until(until.Add(-run)).Abs())
			var last int
			for range 2 {
				i, open := stopMidHold(last)
				last = i
				stopped = append(stopped, time.Now())
				t.Logf("worker %d stopped for %v holding %q", i, expiry, open)
				time.Sleep(expiry)
				if err := workers[i].Cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			}
			killed, open := stopMidHold(last)
			stopped = append(stopped, time.Now())
			if err := workers[killed].Cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			t.Logf("worker %d killed holding %q", killed, open)
			for i, wk := range workers {
				done := false
				for line := range wk.Lines() {
					done = done || line == "done"
				}
				if i != killed && !done {
					t.Errorf("worker %d ended without saying done", i)
				}
			}
			var holds []rwHold
			for i, f := range files {
				hs, _, errs := readRWHolds(t, f)
				holds = append(holds, hs...)
				for _, e := range errs {
					t.Errorf("worker %d: %s", i, e)
				}
			}
			t.Logf("the last fault %v before the workers' end", until.Sub(stopped[len(stopped)-1]))
			checkRWHolds(t, holds, stopped, bound)
		})
	}
}

// checkRWHolds fails unless no writer's hold overlaps another hold, some
// readers held the lock together, tokens are distinct, writers' tokens
// increase in the order of their holds, and a reader's token is above every
// earlier writer's and below every later one's. It fails too unless other
// holds began within bound of each fault (a worker stopped or killed at a
// time in faults).
func checkRWHolds(t *testing.T, holds []rwHold, faults []time.Time, bound time.Duration) {
	var live []rwHold
	dead := 0
	for _, h := range holds {
		if h.live() {
			live = append(live, h)
		} else {
			dead++
		}
	}
	slices.SortFunc(live, func(a, b rwHold) int { return a.began.Compare(b.began) })
	tokens := make(map[uint64]string)
	writers, together := 0, 0
	var lastWriter *rwHold
	for i, a := range live {
		if other, ok := tokens[a.token]; ok {
			t.Errorf("token %d given to %s and %s", a.token, other, a.id)
		}
		tokens[a.token] = a.id
		if a.writer {
			writers++
			if lastWriter != nil && a.token <= lastWriter.token {
				t.Errorf("%v began after %v with a lower token", a, *lastWriter)
			}
			lastWriter = &live[i]
		}
		for _, b := range live[i+1:] {
			if !b.began.Before(a.end()) {
				// b began after a ended: a writer's token is below every later hold's, a reader's below every later writer's.
				if (a.writer || b.writer) && b.token <= a.token {
					t.Errorf("%v began after %v ended, with a lower token", b, a)
				}
				continue
			}
			if a.writer || b.writer {
				end := a.end()
				if b.end().Before(end) {
					end = b.end()
				}
				t.Errorf("%v and %v overlap by %v", a, b, end.Sub(b.began))
			} else {
				together++
			}
		}
	}
	t.Logf("%d holds (%d writers), %d pairs of readers inside together, %d stopped before they began", len(live), writers, together, dead)
	if writers == 0 || together == 0 {
		t.Fatalf("%d writers and %d pairs of readers together: the workers did not exercise the lock", writers, together)
	}
	for _, f := range faults {
		n, first := 0, time.Duration(-1)
		for _, h := range live {
			if !h.began.After(f) {
				continue
			}
			if d := h.began.Sub(f); first < 0 || d < first {
				first = d
			}
			if h.began.Before(f.Add(bound)) {
				n++
			}
		}
		t.Logf("the fault at %v: the first hold after it began %v later, %d within %v", f.Format(time.StampMicro), first, n, bound)
		if n == 0 {
			t.Errorf("no hold began within %v of the fault at %v: the others did not go on", bound, f.Format(time.StampMicro))
		}
	}
}
