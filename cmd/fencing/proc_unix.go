//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// forwarded are the signals hold passes on to its command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// ownGroup puts the command in a process group of its own, so that stopping
// it stops what it started too. A command whose stdin is the terminal stays
// in the terminal's foreground group instead (it could not read otherwise);
// it gets the terminal's Ctrl-C itself, and only it is signalled.
func ownGroup(c *exec.Cmd, interactive bool) {
	if !interactive {
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
}

// signalCmd sends sig to the command's process group, or to the command
// alone when it has none of its own.
func signalCmd(c *exec.Cmd, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if ok && c.SysProcAttr != nil && c.SysProcAttr.Setpgid {
		return syscall.Kill(-c.Process.Pid, s)
	}
	return c.Process.Signal(sig)
}

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
)

// signalNumber is the number of a signal that ended a process, for the
// shell's 128+n exit status.
func signalNumber(ps *os.ProcessState) (int, bool) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return int(ws.Signal()), true
}
