package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hold --max-hold on the default (in-memory) backend: renewed meanwhile,
// the command is stopped at the maximum hold, hold exits 4 and says why.
func TestHoldMaxHold(t *testing.T) {
	const maxHold = 700 * time.Millisecond
	start := time.Now()
	r := want(t, exitLost, "hold", "k", "--ttl", "300ms", "--renew-interval", "50ms", "--max-hold", maxHold.String(), "--", "sh", "-c", "exec sleep 60")
	if took := time.Since(start); took < maxHold {
		t.Errorf("hold exited after %v, before the maximum hold %v", took, maxHold)
	}
	if !strings.Contains(r.stderr, "lease lost: maximum hold reached") || !strings.Contains(r.stderr, "stopping the command") {
		t.Errorf("stderr does not say the maximum hold was reached:\n%v", r)
	}
	for _, c := range []struct{ value, msg string }{{"-1s", "--max-hold"}, {"500us", "maximum hold"}} {
		r := runBin(t, "hold", "k", "--ttl", "1s", "--max-hold", c.value, "--", "true")
		if r.code != exitUsage || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("--max-hold %s: want exit 2 and %q, got %v", c.value, c.msg, r)
		}
	}
}

// On a shared server, renewed and its last renewal shortened, the key is
// free at the maximum hold while the command is still stopping: the lease
// was released, not left to expire (--ttl plus a 30s margin).
func TestHoldMaxHoldReleases(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		p := start(t, s.args("hold", "maxhold", "--ttl", "1s", "--renew-interval", "200ms", "--margin", "30s", "--max-hold", "1500ms", "--grace", "60s",
			"--", "sh", "-c", `trap 'echo term' TERM; echo $$; while :; do sleep 0.05; done`)...)
		var pid int
		fmt.Sscan(p.line(30*time.Second), &pid)
		if pid <= 0 {
			t.Fatal("no pid from the command")
		}
		defer syscall.Kill(-pid, syscall.SIGKILL) // its process group
		if l := p.line(30 * time.Second); l != "term" {
			t.Fatalf("the command printed %q, want term (SIGTERM at the maximum hold)", l)
		}
		var st stateJSON
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			wantJSON(t, &st, s.args("get", "maxhold", "--json")...)
			if !st.Live {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the key is still held 10s after the maximum hold (it would expire in about 30s): %+v", st)
			}
		}
		syscall.Kill(-pid, syscall.SIGKILL)
		if code := p.wait(30 * time.Second); code != exitLost {
			t.Errorf("hold exited %d, want %d; stderr:\n%s", code, exitLost, p.errb.String())
		}
		if !strings.Contains(p.errb.String(), "maximum hold reached") {
			t.Errorf("stderr does not say the maximum hold was reached:\n%s", p.errb.String())
		}
	})
}
