//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// forwarded are the signals hold passes on to its command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// command is a command run under a lease through its watchdog: the
// supervisor's child is the watchdog, which runs the command and signals it
// as told over a pipe (see watchdog_unix.go).
type command struct {
	wd     *exec.Cmd
	ctl    *os.File // the write end of the watchdog's control pipe
	exited chan error
}

// startCommand starts the watchdog, which starts the command. Each gets a
// process group of its own (a kill of the supervisor's group spares the
// watchdog), unless the command's stdin is a terminal: then both stay in
// the terminal's foreground group (the command could not read it
// otherwise), and only the command is signalled.
func startCommand(s commandSpec) (*command, error) {
	self, err := selfPath()
	if err != nil {
		return nil, fmt.Errorf("find this program to start the command's watchdog: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	group := !isTerminal(s.stdin)
	args := append([]string{watchdogArg, s.name, s.grace.String(), orphanMargin(s.ttl).String(),
		(2 * deadlinePoll(s.ttl)).String(), strconv.FormatBool(group), "--"}, s.argv...)
	wd := exec.Command(self, args...)
	wd.Args[0] = os.Args[0] // as ps shows it
	wd.Env = s.env
	wd.Stdin, wd.Stdout, wd.Stderr = s.stdin, s.stdout, s.stderr
	wd.ExtraFiles = []*os.File{r} // fd 3
	wd.SysProcAttr = &syscall.SysProcAttr{Setpgid: group}
	setDeathSignal(wd.SysProcAttr)
	c := &command{wd: wd, ctl: w, exited: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		// The death signal comes when the thread that started the
		// watchdog ends, not the process: this goroutine keeps its thread
		// (so no other goroutine can end it) until the watchdog exits.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := wd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.exited <- wd.Wait()
	}()
	err = <-started
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	c.setDeadline(s.deadline)
	return c, nil
}

// send writes one line to the watchdog. A watchdog that has exited (or
// does not read) is not waited for.
func (c *command) send(kind byte, n int64) {
	c.ctl.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.ctl, "%c %d\n", kind, n)
}

// setDeadline tells the watchdog the lease's deadline, as a reading of
// CLOCK_MONOTONIC, which both processes share.
func (c *command) setDeadline(d time.Time) { c.send('d', monoAfter(time.Until(d))) }

// signal passes sig on to the command (its group).
func (c *command) signal(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		c.send('s', int64(s))
	}
}

// stop stops the command after the lease ended: SIGTERM now, SIGKILL after
// --grace.
func (c *command) stop() { c.send('x', 0) }

// done receives once the watchdog has exited.
func (c *command) done() <-chan error { return c.exited }

// status is the command's exit status, as the watchdog passed it on.
func (c *command) status() int { return statusOf(c.wd.ProcessState) }

// close frees the control pipe, once the watchdog has exited.
func (c *command) close() { c.ctl.Close() }

// signalNumber is the number of a signal that ended a process, for the
// shell's 128+n exit status.
func signalNumber(ps *os.ProcessState) (int, bool) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return int(ws.Signal()), true
}
