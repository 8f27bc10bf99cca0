//go:build unix

package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runWatchdog runs a watchdog over sh -c script (signalled alone, not as a
// group: the test's own group must not be) once the script has printed a
// line, with the lease's deadline left from then, and returns when the
// watchdog saw the command exit.
func runWatchdog(t *testing.T, cfg watchdogConfig, left time.Duration, script string, ctl <-chan ctlMsg, died <-chan os.Signal) time.Time {
	t.Helper()
	return runWatchdogTo(t, io.Discard, 0, cfg, left, script, ctl, died)
}

// runWatchdogTo is runWatchdog with the watchdog's messages written to
// stderr, and supervisor as its supervisor's PID (0: none whose state can
// be read). A command still running after a minute is killed (and the
// test's bounds then fail it).
func runWatchdogTo(t *testing.T, stderr io.Writer, supervisor int, cfg watchdogConfig, left time.Duration, script string, ctl <-chan ctlMsg, died <-chan os.Signal) time.Time {
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
	stuck := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer stuck.Stop()
	w := &watchdog{cfg: cfg, cmd: cmd, stderr: stderr, supervisor: supervisor, deadline: time.Now().Add(left), heard: time.Now()}
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

// ignoring is a command that ignores SIGTERM.
const ignoring = `trap "" TERM; echo; exec sleep 60`

// supervisorProcess starts a process to stand for a watchdog's supervisor
// (its state is what the watchdog reads), killed with the test.
func supervisorProcess(t *testing.T) *os.Process {
	t.Helper()
	c := exec.Command("sleep", "600")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
	})
	return c.Process
}

// TestWatchdogFrozenSupervisor: a supervisor that goes on talking keeps its
// command running even with the lease's deadline near; one silent for the
// slack with the deadline near, and stopped (SIGSTOP), is taken for frozen,
// and its command, one that ignores SIGTERM, is killed before the deadline,
// not after --grace.
func TestWatchdogFrozenSupervisor(t *testing.T) {
	sup := supervisorProcess(t)
	cfg := watchdogConfig{grace: time.Hour, margin: 1500 * time.Millisecond, slack: 500 * time.Millisecond}
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	// The supervisor talks (always of the same deadline: a renewal
	// failing) until half a second into the frozen check's window.
	talkUntil := deadline.Add(-2*cfg.margin + 500*time.Millisecond)
	ctl := make(chan ctlMsg)
	lastSent := make(chan time.Time, 1)
	quit := make(chan struct{})
	go func() {
		var last time.Time
		defer func() {
			sup.Signal(syscall.SIGSTOP)
			lastSent <- last
		}()
		for time.Now().Before(talkUntil) {
			select {
			case ctl <- ctlMsg{kind: 'd', n: monoAfter(time.Until(deadline))}:
				last = time.Now()
			case <-quit:
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	ended := runWatchdogTo(t, io.Discard, sup.Pid, cfg, time.Until(deadline), ignoring, ctl, nil)
	close(quit)
	last := <-lastSent
	t.Logf("the command ended %v after the supervisor's last word, %v before the deadline",
		ended.Sub(last).Round(time.Millisecond), deadline.Sub(ended).Round(time.Millisecond))
	if ended.Before(last) {
		t.Errorf("the command ended %v before the supervisor's last word: a talking supervisor was taken for frozen", last.Sub(ended))
	}
	if !ended.Before(deadline) {
		t.Errorf("the command ended %v after the lease's deadline (the margin was %v, --grace %v)", ended.Sub(deadline), cfg.margin, cfg.grace)
	}
}

// TestWatchdogKillNotPutOff: once the lease has ended ("x") and SIGKILL is
// due after --grace, a later stop (the supervisor's death, or its freeze)
// that would kill later does not put that SIGKILL off.
func TestWatchdogKillNotPutOff(t *testing.T) {
	const grace = 2 * time.Second
	t.Run("death", func(t *testing.T) {
		t.Parallel()
		cfg := watchdogConfig{grace: grace, margin: 100 * time.Millisecond, slack: time.Hour}
		ctl := make(chan ctlMsg)
		closed := make(chan time.Time, 1)
		go func() {
			ctl <- ctlMsg{kind: 'x'} // taken: SIGKILL is due grace from now
			time.Sleep(grace / 2)
			close(ctl) // the death's own SIGKILL: grace from now
			closed <- time.Now()
		}()
		ended := runWatchdog(t, cfg, time.Hour, ignoring, ctl, nil)
		// The death came no earlier than closed: its SIGKILL no earlier
		// than grace after.
		if c := <-closed; !ended.Before(c.Add(grace)) {
			t.Errorf("the command ended %v after the supervisor died, not before the death's own %v: the death put off the SIGKILL due since the lease's end", ended.Sub(c), grace)
		}
	})
	t.Run("freeze", func(t *testing.T) {
		t.Parallel()
		// The frozen check comes a second after the lease's end, and
		// gives the command min(grace, margin) more: a second later than
		// the SIGKILL already due.
		cfg := watchdogConfig{grace: grace, margin: 2 * time.Second, slack: 100 * time.Millisecond}
		sup := supervisorProcess(t)
		sup.Signal(syscall.SIGSTOP)
		start := time.Now()
		left := 2*cfg.margin + time.Second
		ctl := make(chan ctlMsg, 1)
		ctl <- ctlMsg{kind: 'x'}
		ended := runWatchdogTo(t, io.Discard, sup.Pid, cfg, left, ignoring, ctl, nil)
		// The frozen check came no earlier than 2*margin before the
		// deadline, and its SIGKILL no earlier than min(grace, margin)
		// after it.
		if check := start.Add(left - 2*cfg.margin); !ended.Before(check.Add(min(grace, cfg.margin))) {
			t.Errorf("the command ended %v after the frozen check, not before the check's own %v: the freeze put off the SIGKILL due since the lease's end", ended.Sub(check), min(grace, cfg.margin))
		}
	})
}

// TestWatchdogDiesOnce: on Linux a supervisor's death comes twice (the
// death signal and the pipe's end); the watchdog says it once.
func TestWatchdogDiesOnce(t *testing.T) {
	cfg := watchdogConfig{name: "hold", grace: time.Hour, margin: 100 * time.Millisecond, slack: time.Hour}
	ctl := make(chan ctlMsg)
	close(ctl)
	died := make(chan os.Signal, 1)
	died <- os.Interrupt
	var stderr syncBuilder
	// The command ignores SIGTERM: the watchdog sees both news before
	// SIGKILL, margin before the deadline.
	runWatchdogTo(t, &stderr, 0, cfg, 500*time.Millisecond, ignoring, ctl, died)
	if n := strings.Count(stderr.String(), "hold died; stopping its command"); n != 1 {
		t.Errorf("the watchdog said %d times that hold died, want once:\n%s", n, stderr.String())
	}
}
