package main

import (
	"io"
	"syscall"
	"testing"
	"time"
)

// TestWatchdogStarvedSupervisor: on Linux, a supervisor silent with the
// deadline near but not stopped (starved of the CPU on a loaded machine,
// its renewal late) is not taken for frozen before the deadline: it stops
// the command itself if the lease ends. Past the deadline by the slack,
// silence alone stops the command, at once.
func TestWatchdogStarvedSupervisor(t *testing.T) {
	cfg := watchdogConfig{grace: time.Hour, margin: 500 * time.Millisecond, slack: 100 * time.Millisecond}
	sup := supervisorProcess(t) // runs: never stopped
	if stopped, known := stoppedProcess(sup.Pid); stopped || !known {
		t.Fatalf("stoppedProcess(a running sleep) = %v, %v", stopped, known)
	}
	start := time.Now()
	left := 2 * cfg.margin // in the frozen check's window at once
	ended := runWatchdogTo(t, io.Discard, sup.Pid, cfg, left, ignoring, make(chan ctlMsg), nil)
	deadline := start.Add(left)
	t.Logf("the command ended %v after the deadline", ended.Sub(deadline).Round(time.Millisecond))
	if ended.Before(deadline.Add(cfg.slack)) {
		t.Errorf("the command ended %v before the deadline's slack was out: a supervisor that was not stopped was taken for frozen", deadline.Add(cfg.slack).Sub(ended))
	}
	if ended.After(deadline.Add(30 * time.Second)) {
		t.Errorf("the command ended %v after the deadline: silence past it did not stop the command at once", ended.Sub(deadline))
	}
	sup.Signal(syscall.SIGSTOP)
	if stopped, known := stoppedProcess(sup.Pid); !known {
		t.Fatal("stoppedProcess cannot read a sleep's state")
	} else if !stopped {
		// The signal may take a moment to stop it.
		for end := time.Now().Add(10 * time.Second); !stopped && time.Now().Before(end); time.Sleep(time.Millisecond) {
			stopped, _ = stoppedProcess(sup.Pid)
		}
		if !stopped {
			t.Error("stoppedProcess does not see a stopped sleep stopped")
		}
	}
}
