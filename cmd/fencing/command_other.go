//go:build !unix

package main

import (
	"os"
	"os/exec"
	"time"
)

var forwarded = []os.Signal{os.Interrupt}

// command is a command run under a lease as the supervisor's own child:
// outside Unix there is no watchdog, and a command whose supervisor dies
// runs on.
type command struct {
	c      *exec.Cmd
	exited chan error
}

func startCommand(s commandSpec) (*command, error) {
	c := exec.Command(s.argv[0], s.argv[1:]...)
	c.Env = s.env
	c.Stdin, c.Stdout, c.Stderr = s.stdin, s.stdout, s.stderr
	if err := c.Start(); err != nil {
		return nil, err
	}
	cm := &command{c: c, exited: make(chan error, 1)}
	go func() { cm.exited <- c.Wait() }()
	return cm, nil
}

func (c *command) setDeadline(time.Time) {}

func (c *command) signal(sig os.Signal) { c.c.Process.Signal(sig) }

// stop kills the command: there is no SIGTERM here, so no --grace.
func (c *command) stop() { c.c.Process.Kill() }

func (c *command) done() <-chan error { return c.exited }

func (c *command) status() int { return statusOf(c.c.ProcessState) }

func (c *command) close() {}

func signalNumber(ps *os.ProcessState) (int, bool) { return 0, false }

// watchdogArg is never given outside Unix: there is no watchdog.
const watchdogArg = "\x00"

func watchdogMain([]string) int { return exitUsage }
