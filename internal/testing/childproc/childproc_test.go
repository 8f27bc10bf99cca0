package childproc_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/childproc"
)

// TestBinaryBuildsWithoutEnv: with FENCING_ETCD unset, Binary builds etcd
// with scripts/build-kube-binaries.sh (or finds it in its cache) and
// returns a binary that runs.
func TestBinaryBuildsWithoutEnv(t *testing.T) {
	t.Setenv("FENCING_ETCD", "")
	p, err := childproc.Binary("etcd", "FENCING_ETCD")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "etcd Version:") {
		t.Fatalf("%s --version: %v\n%s", p, err, out)
	}
}

func TestBinaryFromEnv(t *testing.T) {
	t.Setenv("FENCING_ETCD", filepath.Join(t.TempDir(), "missing"))
	if p, err := childproc.Binary("etcd", "FENCING_ETCD"); err == nil {
		t.Fatalf("Binary with FENCING_ETCD naming no file = %s, want an error", p)
	}
}

// TestStopEndsAFrozenProcess: Stop ends a process that SIGSTOP froze and
// that handles SIGTERM (as etcd does) with its SIGTERM (the SIGCONT after it
// lets the process run its handler), not with the SIGKILL it sends when the
// process is still there after its 10s grace.
func TestStopEndsAFrozenProcess(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	trap := exec.Command("bash", "-c", `trap "exit 0" TERM; echo trapped; while :; do sleep 0.05; done`)
	p, err := childproc.Start(trap, log)
	if err != nil {
		t.Fatal(err)
	}
	for { // SIGSTOP only once the handler is there
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "trapped") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Process().Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.Stop()
	if took := time.Since(start); took >= 10*time.Second {
		t.Fatalf("Stop took %v: the frozen process ended by SIGKILL after the grace, not by SIGTERM", took)
	}
}
