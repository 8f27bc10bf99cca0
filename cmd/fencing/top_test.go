package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// tmux runs tmux on the test's own server socket, never the user's.
type tmux struct {
	t    *testing.T
	sock string
	// slowest is the longest a capture-pane took: what looking costs on
	// this machine now.
	slowest time.Duration
}

func newTmux(t *testing.T) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tmux not found (apt-get install tmux)")
		}
		t.Skip("tmux not found: install tmux to test top in a terminal")
	}
	// A short path: a socket's path is limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "tmux")
	if err != nil {
		t.Fatal(err)
	}
	tm := &tmux{t: t, sock: filepath.Join(dir, "s")}
	t.Cleanup(func() {
		exec.Command("tmux", "-S", tm.sock, "kill-server").Run()
		os.RemoveAll(dir)
	})
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// capture returns the pane's text, and when it was read.
func (tm *tmux) capture() (string, time.Time) {
	tm.t.Helper()
	began := time.Now()
	out := tm.run("capture-pane", "-p", "-t", "top")
	done := time.Now()
	tm.slowest = max(tm.slowest, done.Sub(began))
	return out, done
}

// waitFor captures the pane until ok accepts it, and returns when it did.
func (tm *tmux) waitFor(what string, ok func(pane string) bool) time.Time {
	tm.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pane, at := tm.capture()
		if ok(pane) {
			return at
		}
		if at.After(deadline) {
			tm.t.Fatalf("the pane never showed %s:\n%s", what, pane)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// topRowOf returns the fields of key's row in a pane, or nil.
func topRowOf(pane, key string) []string {
	for _, l := range strings.Split(pane, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == quote(key) {
			return f
		}
	}
	return nil
}

// shows reports whether key's row has the owner and the waiter count.
func shows(key, owner, waiters string) func(string) bool {
	return func(pane string) bool {
		f := topRowOf(pane, key)
		return len(f) == 7 && f[1] == "live" && f[2] == owner && f[6] == waiters
	}
}

// TestTopTerminal runs top in a tmux pane on a SQLite store, changes the
// key's line from other processes, and checks that the pane shows each
// change within a second of the store having it (plus what one look at the
// pane costs on this machine), and that q quits.
func TestTopTerminal(t *testing.T) {
	tm := newTmux(t)
	db := filepath.Join(t.TempDir(), "top.db")
	flags := []string{"--sqlite-path", db}
	holder := start(t, append([]string{"hold", "top/k"}, append(flags, "--ttl", "30s", "--owner", "holder-1", "--", "sh", "-c", "echo held; sleep 120")...)...)
	if l := holder.line(30 * time.Second); l != "held" {
		t.Fatalf("hold printed %q", l)
	}
	tm.run("new-session", "-d", "-s", "top", "-x", "120", "-y", "20",
		strings.Join(append([]string{binary, "top", "top/", "--interval", "100ms"}, flags...), " "))
	tm.waitFor("the holder", shows("top/k", "holder-1", "0"))

	lr := recipetest.SQLBackend(t, "sqlite", "file:"+db+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)", sqlbackend.SQLite, "", false).(backend.LineReader)
	waiter := start(t, append([]string{"hold", "top/k"}, append(flags, "--ttl", "30s", "--wait", "--fifo", "--owner", "waiter-1", "--", "echo", "got")...)...)
	joined := waitLine(t, lr, "top/k", 1)
	shown := tm.waitFor("one waiter", shows("top/k", "holder-1", "1"))
	lag := shown.Sub(joined)
	bound := time.Second + tm.slowest
	t.Logf("a waiter's join showed %v after the store had it (bound %v: 1s + the slowest look at the pane, %v)", lag, bound, tm.slowest)
	if lag > bound {
		t.Errorf("top showed the new waiter %v after the store had it, want within %v", lag, bound)
	}

	// The holder ends: the waiter takes the key and leaves the line.
	holder.cmd.Process.Signal(os.Interrupt)
	if code := waiter.wait(30 * time.Second); code != 0 {
		t.Fatalf("the waiter exited %d; stderr:\n%s", code, waiter.errb.String())
	}
	left := waitLine(t, lr, "top/k", 0)
	shown = tm.waitFor("the line empty", func(pane string) bool {
		f := topRowOf(pane, "top/k")
		return len(f) == 7 && f[6] == "0" && f[2] != "holder-1"
	})
	lag = shown.Sub(left)
	t.Logf("the waiter's leaving showed %v after the store had it", lag)
	if lag > bound {
		t.Errorf("top showed the line's change %v after the store had it, want within %v", lag, bound)
	}

	tm.run("send-keys", "-t", "top", "q")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if exec.Command("tmux", "-S", tm.sock, "has-session", "-t", "top").Run() != nil {
			break // top quit, and its session with it
		}
		if time.Now().After(deadline) {
			pane, _ := tm.capture()
			t.Fatalf("top did not quit on q:\n%s", pane)
		}
	}
}

// waitLine reads key's line until it has n waiters, and returns when it
// first read that.
func waitLine(t *testing.T, lr backend.LineReader, key string, n int) time.Time {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := lr.LineLength(ctx, key)
		cancel()
		if err != nil {
			t.Fatalf("LineLength: %v", err)
		}
		if got == n {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q's line never had %d waiters (has %d)", key, n, got)
		}
	}
}

// Without a terminal (and with --once), top prints its table once; --json
// prints it as JSON.
func TestTopOnce(t *testing.T) {
	db := filepath.Join(t.TempDir(), "top.db")
	flags := []string{"--sqlite-path", db}
	if r := runBin(t, append([]string{"grant", "jobs/a"}, append(flags, "--ttl", "1m", "--owner", "me")...)...); r.code != 0 {
		t.Fatalf("grant: %v", r)
	}
	r := runBin(t, append([]string{"top", "jobs/"}, flags...)...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "KEY") || len(topRowOf(r.stdout, "jobs/a")) != 7 || topRowOf(r.stdout, "jobs/a")[2] != "me" {
		t.Fatalf("top without a terminal: %v", r)
	}
	r = runBin(t, append([]string{"top", "jobs/", "--json"}, flags...)...)
	var out topJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
		t.Fatalf("top --json: %v (%v)", r, err)
	}
	if len(out.Keys) != 1 || out.Keys[0].Key != "jobs/a" || !out.Keys[0].Live || out.Keys[0].Owner != "me" || out.Keys[0].Waiters != 0 {
		t.Fatalf("top --json: %+v", out)
	}
}

// memorySession is a session over a fresh memory backend (and its
// coordinator with opts), closed with the test.
func memorySession(t *testing.T, opts ...fencing.Option) (*session, *memorybackend.Backend) {
	t.Helper()
	mb := memorybackend.New()
	s := &session{c: fencing.New(mb, opts...), b: mb, name: "memory", where: "memory", timeout: 10 * time.Second, close: func() { mb.Close() }}
	t.Cleanup(s.Close)
	return s, mb
}

// TestTopReadPages: keys over several pages of List (its default page is
// 100 keys) are all read, each once, in order.
func TestTopReadPages(t *testing.T) {
	s, _ := memorySession(t)
	ctx := context.Background()
	const n = 2*memorybackend.DefaultListLimit + 50
	for i := range n {
		if _, err := s.c.Grant(ctx, fmt.Sprintf("pages/%03d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.c.Grant(ctx, "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a cursor not followed would loop
	defer cancel()
	rows, err := topRead(rctx, s, "pages/")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != n {
		t.Fatalf("top read %d keys over the pages, want %d", len(rows), n)
	}
	for i, r := range rows {
		if want := fmt.Sprintf("pages/%03d", i); r.Key != want || !r.Live || r.Waiters != 0 {
			t.Fatalf("row %d is %+v, want %q live with no waiters", i, r, want)
		}
	}
}

// TestTopReadOrder: the most contended keys come first: most waiters, then
// live, delayed, free, then by key (the keys' names are in the opposite
// order, so that no criterion holds by chance).
func TestTopReadOrder(t *testing.T) {
	s, mb := memorySession(t)
	ctx := context.Background()
	for _, k := range []string{"o/5", "o/4", "o/3", "o/1"} {
		if _, err := s.c.Grant(ctx, k, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	free, err := s.c.Grant(ctx, "o/0", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.c.Release(ctx, "o/0", free.ID); err != nil {
		t.Fatal(err)
	}
	// o/2 is delayed: its lease ends (forced, not released) with a
	// minute's lock delay.
	if _, err := fencing.New(mb, fencing.WithDefaultLockDelay(time.Minute)).Grant(ctx, "o/2", time.Hour); err != nil {
		t.Fatal(err)
	}
	if ended, err := s.c.ForceRelease(ctx, "o/2"); err != nil || !ended {
		t.Fatalf("ForceRelease: %v, %v", ended, err)
	}
	// Waiters in line: two on o/4, one on o/5.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for _, k := range []string{"o/4", "o/4", "o/5"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h, err := s.c.Lock(wctx, k, time.Minute, fencing.WithFIFO()); err == nil {
				h.Release(ctx)
			}
		}()
	}
	for k, n := range map[string]int{"o/4": 2, "o/5": 1} {
		waitLine(t, mb, k, n)
	}
	rows, err := topRead(ctx, s, "o/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s:%s:%d", r.Key, topCells(r, false)[1], r.Waiters))
	}
	want := []string{"o/4:live:2", "o/5:live:1", "o/1:live:0", "o/3:live:0", "o/2:delayed:0", "o/0:free:0"}
	if !slices.Equal(got, want) {
		t.Errorf("top's order:\n got %v\nwant %v", got, want)
	}
}

// TestTopStale: after a read that fails (the store down), top's view keeps
// the rows of the last read that succeeded, and its time, but says they are
// stale and shows no time left, until a read succeeds again.
func TestTopStale(t *testing.T) {
	up, _ := memorySession(t)
	down, _ := memorySession(t)
	down.Close() // every request fails
	ctx := context.Background()
	if _, err := up.c.Grant(ctx, "s/k", time.Hour); err != nil {
		t.Fatal(err)
	}
	m := &topModel{ctx: ctx, s: up, prefix: "s/", interval: time.Second, height: 24,
		watches: map[string]backend.Subscription{}, woken: make(chan struct{}, 1)}
	t.Cleanup(m.closeWatches)
	// read runs one read of the model's on s, and returns the view's
	// title line and the key's row.
	read := func(s *session) (string, []string) {
		t.Helper()
		m.s = s
		m.Update(m.readCmd()())
		m.s = up // the view names the store
		view := m.View().Content
		return strings.SplitN(view, "\n", 2)[0], topRowOf(view, "s/k")
	}
	title, row := read(up)
	first := m.read.Format("15:04:05.000")
	if len(row) != 7 || row[4] == "?" || strings.Contains(title, "STALE") || !strings.Contains(title, "read "+first) {
		t.Fatalf("after a read: title %q, row %q", title, row)
	}
	time.Sleep(5 * time.Millisecond) // the failed read's time differs from the first's
	title, row = read(down)
	if m.err == nil {
		t.Fatal("the read on a closed store succeeded")
	}
	if len(row) != 7 || row[4] != "?" || !strings.Contains(title, "STALE") || !strings.Contains(title, "read "+first) {
		t.Errorf("after a failed read: title %q, row %q; want the first read's time, STALE and no time left (?)", title, row)
	}
	title, row = read(up)
	if len(row) != 7 || row[4] == "?" || strings.Contains(title, "STALE") || strings.Contains(title, "read "+first) {
		t.Errorf("after a read that succeeded again: title %q, row %q; want the new read's time and the time left", title, row)
	}
}
