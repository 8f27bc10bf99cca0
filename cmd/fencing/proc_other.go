//go:build !unix

package main

import (
	"os"
	"os/exec"
)

var forwarded = []os.Signal{os.Interrupt}

func ownGroup(c *exec.Cmd, interactive bool) {}

func signalCmd(c *exec.Cmd, sig os.Signal) error {
	if sig == sigTerm || sig == sigKill {
		return c.Process.Kill() // no SIGTERM here
	}
	return c.Process.Signal(sig)
}

var (
	sigTerm os.Signal = os.Interrupt
	sigKill os.Signal = os.Kill
)

func signalNumber(ps *os.ProcessState) (int, bool) { return 0, false }
