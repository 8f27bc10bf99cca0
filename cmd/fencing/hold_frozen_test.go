package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// TestHoldExitsWhenServerFrozen: when the server freezes (SIGSTOP) while
// the command runs, hold exits within a second of the command's end with
// the command's status, leaving the release to the lease's expiry.
func TestHoldExitsWhenServerFrozen(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{AppendOnly: true})
	t.Cleanup(func() { srv.Resume() })
	goFile := filepath.Join(t.TempDir(), "go")
	script := `echo started; while [ ! -e "$1" ]; do sleep 0.05; done; echo done; exit 7`
	p := start(t, "hold", "frozen", "--ttl", "30s", "--redis-addr", srv.Addr(), "--", "sh", "-c", script, "sh", goFile)
	if l := p.line(30 * time.Second); l != "started" {
		t.Fatalf("the command printed %q", l)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if l := p.line(10 * time.Second); l != "done" {
		t.Fatalf("the command printed %q", l)
	}
	ended := time.Now()
	code := p.wait(30 * time.Second)
	took := time.Since(ended)
	if code != 7 || took > time.Second {
		t.Errorf("hold exited %d, %v after its command; want 7 within 1s; stderr:\n%s", code, took, p.errb.String())
	}
	if !strings.Contains(p.errb.String(), "the lease will expire") {
		t.Errorf("stderr does not say the lease is left to expire:\n%s", p.errb.String())
	}
}
