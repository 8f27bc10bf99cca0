//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// watchdogArg, as this binary's first argument, makes it a command's
// watchdog rather than the fencing command: the process that hold, elect
// and sem start in their command's place, which starts the command and
// ends it when the supervisor cannot:
//
//	fencing __fencing-watchdog NAME GRACE MARGIN SLACK GROUP -- COMMAND [ARG...]
//
// Its control pipe is fd 3, which carries lines from the supervisor:
// "d N", the lease's deadline as a CLOCK_MONOTONIC reading (first, and again
// every deadline poll, renewed or not: the supervisor's heartbeat); "s N",
// pass signal N on to the command; "x", the lease ended: stop the command
// (SIGTERM, SIGKILL after GRACE). End of file (or, on Linux, the death
// signal) means the supervisor died: the command gets SIGTERM at once and
// SIGKILL after GRACE, or MARGIN before the deadline, whichever comes
// first. A supervisor silent for SLACK while the deadline is less than
// twice MARGIN away, and stopped (on Linux, where its state can be read:
// a supervisor only starved of the CPU is not), is taken for frozen: it
// can renew nothing, and the lease ends at the deadline, so the command is
// stopped as a dead supervisor's is, SIGKILL MARGIN before the deadline
// at the latest. A supervisor silent past the deadline by SLACK is taken
// for frozen whatever its state: its command is killed at once. A SIGKILL
// once due is never put off by a later stop. With
// GROUP true the command gets a process group of its own, which is
// signalled whole, and the watchdog one of its own too (its supervisor's
// group may be killed whole). NAME (hold, elect or sem) names the supervisor in its
// messages. It exits with the command's status (128+n for signal n).
const watchdogArg = "__fencing-watchdog"

// watchdogConfig is the watchdog's command line.
type watchdogConfig struct {
	name                 string
	grace, margin, slack time.Duration
	group                bool
	argv                 []string
}

func parseWatchdogArgs(args []string) (watchdogConfig, error) {
	var cfg watchdogConfig
	if len(args) < 7 || args[5] != "--" {
		return cfg, errors.New("want NAME GRACE MARGIN SLACK GROUP -- COMMAND [ARG...]")
	}
	cfg.name = args[0]
	var err error
	for i, d := range []*time.Duration{&cfg.grace, &cfg.margin, &cfg.slack} {
		if *d, err = time.ParseDuration(args[1+i]); err != nil {
			return cfg, err
		}
	}
	if cfg.group, err = strconv.ParseBool(args[4]); err != nil {
		return cfg, err
	}
	cfg.argv = args[6:]
	return cfg, nil
}

// ctlMsg is one line of the control pipe.
type ctlMsg struct {
	kind byte
	n    int64
}

// readControl sends the control pipe's lines on the returned channel and
// closes it at end of file (or on an error: the supervisor is gone either
// way). A line it cannot parse is dropped.
func readControl(r io.Reader) <-chan ctlMsg {
	out := make(chan ctlMsg, 16)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var m ctlMsg
			if _, err := fmt.Sscanf(sc.Text(), "%c %d", &m.kind, &m.n); err == nil {
				out <- m
			}
		}
	}()
	return out
}

// watchdogMain runs the watchdog and returns its exit status.
func watchdogMain(args []string) int {
	cfg, err := parseWatchdogArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencing: watchdog:", err)
		return exitUsage
	}
	// The signals sent to the terminal's group reach the command too: the
	// watchdog only must not die of them. The death signal is its own.
	caught := make(chan os.Signal, 8)
	signal.Notify(caught, forwarded...)
	died := make(chan os.Signal, 1)
	if len(deathSignals) > 0 {
		signal.Notify(died, deathSignals...)
	}
	syscall.CloseOnExec(3) // the command must not hold the pipe
	ctl := readControl(os.NewFile(3, "control pipe"))
	first, ok := <-ctl
	if !ok || first.kind != 'd' {
		return exitLost // the supervisor died before the command started
	}
	cmd := exec.Command(cfg.argv[0], cfg.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: cfg.group}
	// On Linux the command dies with the watchdog, should the watchdog
	// itself be killed. The thread that starts the command must live as
	// long as the watchdog: this goroutine keeps it.
	runtime.LockOSThread()
	setCommandDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "fencing: %v\n", err)
		return 127
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	w := &watchdog{cfg: cfg, cmd: cmd, stderr: os.Stderr, supervisor: os.Getppid(),
		deadline: time.Now().Add(monoUntil(first.n)), heard: time.Now()}
	w.run(ctl, died, caught, exited)
	return statusOf(cmd.ProcessState)
}

// watchdog stops its command when the lease ends, as its supervisor tells
// it or as its deadline nears with the supervisor silent, and when its
// supervisor dies.
type watchdog struct {
	cfg        watchdogConfig
	cmd        *exec.Cmd
	stderr     io.Writer
	supervisor int       // its PID, to tell a stopped one from a starved one
	deadline   time.Time // the lease's, as last told
	heard      time.Time // when the supervisor's last line came
	stopping   bool      // SIGTERM sent
	orphan     bool      // the supervisor's death was seen (and said)
	killAt     time.Time // when SIGKILL is due, once stopping
	kill       *time.Timer
}

// frozenCheck is when the watchdog next looks for a frozen supervisor:
// once the deadline is less than twice the margin away and the supervisor
// has been silent for the slack.
func (w *watchdog) frozenCheck() time.Duration {
	return time.Until(later(w.deadline.Add(-2*w.cfg.margin), w.heard.Add(w.cfg.slack)))
}

// frozen reports whether the silent supervisor is frozen: stopped, or
// silent past the deadline by the slack, or (where its state cannot be
// read) silent.
func (w *watchdog) frozen() bool {
	stopped, known := stoppedProcess(w.supervisor)
	return stopped || !known || time.Since(w.deadline) >= w.cfg.slack
}

// run returns once the command has exited.
func (w *watchdog) run(ctl <-chan ctlMsg, died, caught <-chan os.Signal, exited <-chan struct{}) {
	frozen := time.NewTimer(w.frozenCheck())
	defer frozen.Stop()
	frozenC := frozen.C
	var killC <-chan time.Time
	for {
		if w.kill != nil {
			killC = w.kill.C
		}
		select {
		case <-exited:
			if w.kill != nil {
				w.kill.Stop()
			}
			return
		case m, ok := <-ctl:
			if !ok {
				ctl, frozenC = nil, nil
				w.orphaned()
				continue
			}
			w.heard = time.Now()
			switch m.kind {
			case 'd':
				w.deadline = time.Now().Add(monoUntil(m.n))
			case 's':
				w.signal(syscall.Signal(m.n))
			case 'x':
				w.stop(w.cfg.grace)
			}
			if frozenC != nil {
				frozen.Reset(w.frozenCheck())
			}
		case <-died:
			died, frozenC = nil, nil
			w.orphaned()
		case <-frozenC:
			if d := w.frozenCheck(); d > 0 {
				frozen.Reset(d) // news came since the timer was set
				continue
			}
			if !w.frozen() {
				frozen.Reset(w.cfg.slack) // starved, not stopped: look again
				continue
			}
			// The supervisor is frozen with the lease near its end: it
			// can renew nothing, so the lease ends at the deadline, and
			// the command must end before it.
			frozenC = nil
			d := w.beforeDeadline()
			if !w.stopping {
				fmt.Fprintf(w.stderr, "fencing: %s has been silent for %v with %v left on the lease (is it stopped?); stopping the command (SIGTERM, SIGKILL in %v, before the lease's deadline)\n",
					w.cfg.name, time.Since(w.heard).Round(time.Millisecond), max(0, time.Until(w.deadline)).Round(time.Millisecond), d.Round(time.Millisecond))
			}
			w.stop(d)
		case <-killC:
			killC = nil
			w.signal(syscall.SIGKILL)
		case <-caught:
			// Sent to the group (or the terminal's): the command has it.
		}
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// beforeDeadline is how long the command of a supervisor that can no
// longer renew has before SIGKILL: --grace, or until margin before the
// deadline, whichever is first.
func (w *watchdog) beforeDeadline() time.Duration {
	return min(w.cfg.grace, max(0, time.Until(w.deadline)-w.cfg.margin))
}

// orphaned stops the command of a dead supervisor (once: on Linux both the
// death signal and the pipe's end tell of it): SIGKILL comes after --grace
// or margin before the deadline, whichever is first, so that the command
// is gone before the lease could pass to another holder.
func (w *watchdog) orphaned() {
	if w.orphan {
		return
	}
	w.orphan = true
	d := w.beforeDeadline()
	fmt.Fprintf(w.stderr, "fencing: %s died; stopping its command (SIGTERM, SIGKILL in %v, before the lease's deadline)\n", w.cfg.name, d.Round(time.Millisecond))
	w.stop(d)
}

// stop sends SIGTERM (once) and schedules SIGKILL within d from now, or
// earlier if it was due earlier already.
func (w *watchdog) stop(d time.Duration) {
	if !w.stopping {
		w.stopping = true
		w.signal(syscall.SIGTERM)
	}
	at := time.Now().Add(d)
	if w.kill != nil && !at.Before(w.killAt) {
		return
	}
	if w.kill != nil {
		w.kill.Stop()
	}
	w.killAt, w.kill = at, time.NewTimer(d)
}

// signal sends sig to the command's group, or to the command alone. The
// watchdog is never in that group: it outlives the command, to reap it.
func (w *watchdog) signal(sig syscall.Signal) {
	if w.cfg.group {
		syscall.Kill(-w.cmd.Process.Pid, sig)
		return
	}
	w.cmd.Process.Signal(sig)
}
