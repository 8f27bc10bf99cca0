package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/childproc"
	"github.com/fencing-go/fencing/sqlbackend"
)

// Child processes of the tests below (see runChild), on one SQLite file
// with the host's clock:
//
//   - "delay-holder" grants key "delayed" for delayTTL with delayLock as its
//     lock delay, says "granted", and waits to be killed.
//   - "fifo-waiter/NAME" subscribes to its turn on key "fifo", joins the
//     line ("joined AHEAD"), waits for its turn counting the wake-ups, then
//     grants key "fifo" once, says "granted TOKEN WAKES", releases and
//     leaves the line.
const (
	delayTTL  = 300 * time.Millisecond
	delayLock = time.Second
	fifoTTL   = 30 * time.Second // no entry expires during the test
)

// runQueueChild runs the roles above; it reports false for other roles.
func runQueueChild(ctx context.Context, db *sql.DB, role string) bool {
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	switch {
	case role == "delay-holder":
		b, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
		if err != nil {
			fail(err)
		}
		if _, err := b.Grant(ctx, backend.Request{Key: "delayed", LeaseID: "killed-holder", Timeout: delayTTL, LockDelay: delayLock}); err != nil {
			fail(err)
		}
		fmt.Println("granted")
		time.Sleep(time.Minute)
		os.Exit(1)
	case strings.HasPrefix(role, "fifo-waiter/"):
		name := strings.TrimPrefix(role, "fifo-waiter/")
		b, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
		if err != nil {
			fail(err)
		}
		defer b.Close()
		sub, err := b.NotifyTurn(ctx, "fifo", name)
		if err != nil {
			fail(err)
		}
		defer sub.Close()
		p, err := b.Enqueue(ctx, "fifo", name, fifoTTL)
		if err != nil {
			fail(err)
		}
		fmt.Println("joined", p.Ahead)
		wakes := 0
		for p.Ahead > 0 {
			t := time.NewTimer(p.AheadRemaining)
			select {
			case <-sub.Freed():
				wakes++
			case <-t.C:
			}
			t.Stop()
			if p, err = b.Enqueue(ctx, "fifo", name, fifoTTL); err != nil {
				fail(err)
			}
		}
		l, err := b.Grant(ctx, backend.Request{Key: "fifo", LeaseID: name + "-lease", Timeout: 10 * time.Second})
		if err != nil {
			fail(err) // the head's one grant attempt must succeed
		}
		fmt.Println("granted", l.Token, wakes)
		if err := b.Release(ctx, "fifo", name+"-lease"); err != nil {
			fail(err)
		}
		if err := b.Dequeue(ctx, "fifo", name); err != nil {
			fail(err)
		}
	default:
		return false
	}
	return true
}

// startChild runs the test binary as a child of role on the file at path.
func startChild(t *testing.T, role, path string) *childproc.Helper {
	t.Helper()
	return childproc.StartTestBinary(t, []string{"-test.run=^$"}, childEnv+"="+role+":"+path)
}

// sharedFile returns a backend on a new database file with its tables, and
// the file's path.
func sharedFile(t *testing.T) (*sqlbackend.Backend, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shared.db")
	b, err := sqlbackend.New(context.Background(), openSQLitePath(t, path), sqlbackend.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTables(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b, path
}

// TestSQLiteLockDelayAcrossProcesses: a process holding a lease with a lock
// delay is killed (SIGKILL) and never releases. Another process's grants
// are refused while the lease is live, then with Delayed while the delay
// runs (Inspect says until when), and the first grant that succeeds comes
// no earlier than the refusals said: both judge by the host's boot clock
// through the shared file.
func TestSQLiteLockDelayAcrossProcesses(t *testing.T) {
	b, path := sharedFile(t)
	ctx := context.Background()
	holder := startChild(t, "delay-holder", path)
	if l := holder.Next(t, time.Minute); l != "granted" {
		t.Fatalf("delay-holder: %q", l)
	}
	holder.Cmd.Process.Signal(syscall.SIGKILL)
	holder.Cmd.Wait()

	var live, delayed int
	var opensBy time.Time // the latest moment a refusal said the key opens
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		sent := time.Now()
		_, err := b.Grant(ctx, backend.Request{Key: "delayed", LeaseID: fmt.Sprintf("next-%d", live+delayed), Timeout: time.Minute})
		if err == nil {
			if now := time.Now(); now.Before(opensBy) {
				t.Fatalf("granted %v before the refusals said the key opens", opensBy.Sub(now))
			}
			if delayed == 0 {
				t.Fatalf("granted after %d refusals of the live lease and none in a lock delay", live)
			}
			t.Logf("%d refusals of the live lease, %d during the lock delay, then granted", live, delayed)
			return
		}
		var held *backend.HeldError
		if !errors.As(err, &held) {
			t.Fatal(err)
		}
		if held.Delayed {
			delayed++
			st, err := b.Inspect(ctx, "delayed")
			switch {
			case err != nil:
				t.Fatalf("Inspect during the lock delay: %v", err)
			case st == (backend.KeyState{MaxToken: st.MaxToken}) && time.Since(sent)+5*time.Millisecond >= held.Remaining:
				// The delay ended between the refusal and this look (a busy
				// machine): the key is free, as it should be by now.
			case st.Live || st.DelayRemaining <= 0 || st.DelayRemaining > delayLock || st.DelayedUntil.IsZero():
				t.Fatalf("Inspect during the lock delay (refused %v ago with %v left): %+v", time.Since(sent), held.Remaining, st)
			}
		} else {
			if delayed > 0 {
				t.Fatalf("a refusal of a live lease after one in the lock delay: %v", err)
			}
			live++
			if held.Remaining <= delayLock || held.Remaining > delayTTL+delayLock {
				t.Fatalf("refused by the live lease with Remaining %v, want its time left plus the lock delay %v", held.Remaining, delayLock)
			}
		}
		if by := sent.Add(held.Remaining); by.After(opensBy) {
			opensBy = by
		}
	}
	t.Fatalf("not granted within 10s (%d refusals of the live lease, %d during the delay)", live, delayed)
}

// TestSQLiteFIFOAcrossProcesses: waiters in separate processes join one
// line in a known order behind an entry of the test's; when it leaves, they
// are granted in the order they joined, each with the one grant attempt it
// makes at the head, and each handoff wakes only the waiter behind the
// leaver: every waiter wakes exactly once.
func TestSQLiteFIFOAcrossProcesses(t *testing.T) {
	b, path := sharedFile(t)
	ctx := context.Background()
	if p, err := b.Enqueue(ctx, "fifo", "test-head", fifoTTL); err != nil || p.Ahead != 0 {
		t.Fatalf("Enqueue: %+v, %v", p, err)
	}
	const waiters = 4
	type result struct {
		token, wakes int
		err          string
	}
	results := make([]chan result, waiters)
	var cmds []*exec.Cmd
	for i := range waiters {
		child := startChild(t, fmt.Sprintf("fifo-waiter/w%d", i), path)
		cmds = append(cmds, child.Cmd)
		if l := child.Next(t, time.Minute); l != fmt.Sprintf("joined %d", i+1) {
			t.Fatalf("waiter %d: %q, want joined %d", i, l, i+1)
		}
		results[i] = make(chan result, 1)
		go func() {
			var r result
			for l := range child.Lines() {
				f := strings.Fields(l)
				if len(f) == 3 && f[0] == "granted" {
					r.token, _ = strconv.Atoi(f[1])
					r.wakes, _ = strconv.Atoi(f[2])
				} else {
					r.err += l + "\n"
				}
			}
			results[i] <- r
		}()
	}
	if err := b.Dequeue(ctx, "fifo", "test-head"); err != nil {
		t.Fatal(err)
	}
	for i := range waiters {
		r := <-results[i]
		if err := cmds[i].Wait(); err != nil || r.err != "" {
			t.Fatalf("waiter %d: %v %s", i, err, r.err)
		}
		if r.token != i+1 {
			t.Fatalf("waiter %d (joined %d-th) got token %d, want %d: not in join order", i, i+1, r.token, i+1)
		}
		if r.wakes != 1 {
			t.Fatalf("waiter %d woke %d times, want once (by the leave of the entry directly ahead)", i, r.wakes)
		}
	}
}
