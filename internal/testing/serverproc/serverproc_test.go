package serverproc

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process that exits before it is ready fails WaitReady with its output
// and the readiness check's last error.
func TestWaitReadyExited(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", "echo boom >&2; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(time.Minute, func() error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") || !strings.Contains(err.Error(), "boom") ||
		!strings.Contains(err.Error(), "not yet") {
		t.Fatalf("WaitReady: %v; want the exit, the output and the last check's error", err)
	}
}

// Stop kills a process that ignores its signal once the timeout has
// passed, and waits for it.
func TestStopKillsAfterTimeout(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", "trap '' TERM; echo ready; exec sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(time.Minute, func() error {
		if !strings.Contains(p.Output(), "ready") {
			return errors.New("no output yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.Stop(syscall.SIGTERM, 100*time.Millisecond)
	select {
	case <-p.done:
	default:
		t.Fatal("Stop returned before the process exited")
	}
	if ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the process ended with %v; want killed by SIGKILL", p.cmd.ProcessState)
	}
	var nilProc *Proc
	nilProc.Stop(syscall.SIGTERM, time.Second) // a stopped server's: does nothing
}
