package main

import (
	"io"
	"os"
	"time"
)

// A command is hold's, elect's or sem's COMMAND, started by startCommand
// and stopped by its methods.
//
// On Unix a watchdog process (this binary, see watchdog_unix.go) stands
// between the supervisor and the command, so that the command ends when the
// supervisor dies or stays frozen past the lease's deadline; elsewhere the
// command is the supervisor's own child (command_other.go).

// commandSpec is what startCommand needs to run a command under a lease.
type commandSpec struct {
	// name is the supervisor's: hold, elect or sem.
	name string
	argv []string
	env  []string
	// stdin, stdout and stderr are the command's.
	stdin          io.Reader
	stdout, stderr io.Writer
	// grace is --grace: how long the command has between SIGTERM and
	// SIGKILL after the lease is lost.
	grace time.Duration
	// ttl is the lease's TTL, from which the watchdog's margins follow.
	ttl time.Duration
	// deadline is the lease's Deadline at the start.
	deadline time.Time
}

// orphanMargin is how long before the lease's deadline an orphaned command
// (its supervisor died) is killed: a fifth of the TTL, at most 2s.
func orphanMargin(ttl time.Duration) time.Duration { return min(ttl/5, 2*time.Second) }

// deadlinePoll is how often the supervisor passes the lease's deadline on to
// the watchdog, renewed or not: a twentieth of the TTL, from 10ms to 250ms.
// The watchdog takes the supervisor for frozen once it has been silent
// twice that long with the deadline less than two orphanMargins away (a
// renewal keeps the deadline further, by default) and, on Linux, is
// stopped; or once it is silent past the deadline by twice that long.
func deadlinePoll(ttl time.Duration) time.Duration {
	return min(max(ttl/20, 10*time.Millisecond), 250*time.Millisecond)
}

// statusOf is the exit status of a finished process as a shell reports it.
func statusOf(ps *os.ProcessState) int {
	if n, ok := signalNumber(ps); ok {
		return 128 + n
	}
	return ps.ExitCode()
}
