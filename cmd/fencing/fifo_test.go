package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
		var before waitState
		if s.waitState != nil {
			before = s.waitState(t)
		}
		joined := func() { // the waiter just started is in line
			if s.waitState == nil {
				time.Sleep(1500 * time.Millisecond)
				return
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if now := s.waitState(t); now.subs > before.subs {
					before = now
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: the waiter's watch of the line not seen", s.name)
				}
			}
			time.Sleep(500 * time.Millisecond) // its Enqueue follows the watch
		}
		second := hold("second")
		joined()
		third := hold("third")
		joined()
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
