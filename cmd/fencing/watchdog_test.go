//go:build unix

package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// runWatchdog runs a watchdog over sh -c script (signalled alone, not as a
// group: the test's own group must not be) once the script has printed a
// line, with the lease's deadline left from then, and returns when the
// watchdog saw the command exit.
func runWatchdog(t *testing.T, cfg watchdogConfig, left time.Duration, script string, ctl <-chan ctlMsg, died <-chan os.Signal) time.Time {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	w := &watchdog{cfg: cfg, cmd: cmd, stderr: io.Discard, deadline: time.Now().Add(left)}
	w.run(ctl, died, nil, exited)
	return time.Now()
}

// TestWatchdogPipeAlone: the end of the control pipe, with no death signal
// (outside Linux), stops the command: at once for one that obeys SIGTERM;
// one that ignores it is killed margin before the deadline, well before
// --grace.
func TestWatchdogPipeAlone(t *testing.T) {
	cfg := watchdogConfig{grace: time.Hour, margin: 100 * time.Millisecond, slack: time.Hour}
	for _, c := range []struct {
		name, script string
		left         time.Duration
	}{
		{"obeying", "echo; exec sleep 60", time.Hour},
		{"ignoring", `trap "" TERM; echo; exec sleep 60`, 500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctl := make(chan ctlMsg)
			close(ctl)
			start := time.Now()
			ended := runWatchdog(t, cfg, c.left, c.script, ctl, nil)
			// SIGKILL comes margin before the deadline, not after
			// --grace (a loaded machine adds its delay to both).
			if took := ended.Sub(start); took > time.Minute || took < c.left-cfg.margin && c.left < time.Hour {
				t.Errorf("the command ended %v after the pipe did; the deadline was %v away, the margin %v", took, c.left, cfg.margin)
			}
		})
	}
}

// TestWatchdogDeathSignal: the death signal alone (the pipe still open)
// stops the command.
func TestWatchdogDeathSignal(t *testing.T) {
	cfg := watchdogConfig{grace: time.Hour, margin: 100 * time.Millisecond, slack: time.Hour}
	died := make(chan os.Signal, 1)
	died <- os.Interrupt
	start := time.Now()
	if ended := runWatchdog(t, cfg, time.Hour, "echo; exec sleep 60", make(chan ctlMsg), died); ended.Sub(start) > time.Minute {
		t.Errorf("the command ended %v after the death signal", ended.Sub(start))
	}
}

// TestWatchdogFrozenSupervisor: with no news past the deadline (and its
// slack), the watchdog stops the command as a lost lease does; a renewal
// that came in time moves that moment on.
func TestWatchdogFrozenSupervisor(t *testing.T) {
	cfg := watchdogConfig{grace: time.Hour, margin: time.Hour, slack: 50 * time.Millisecond}
	ctl := make(chan ctlMsg, 1)
	start := time.Now()
	renewed := 400 * time.Millisecond
	ctl <- ctlMsg{kind: 'd', n: monoAfter(renewed)}
	ended := runWatchdog(t, cfg, 100*time.Millisecond, "echo; exec sleep 60", ctl, nil)
	if took := ended.Sub(start); took < renewed {
		t.Errorf("the command ended %v after the start, before the renewed deadline %v", took, renewed)
	}
}
