// Package serverproc runs a server as a child process of a test, for the
// harnesses of real servers (pgtest, mysqltest, redistest): on a free
// loopback port, with its output kept for the error that explains a failed
// start, waited for until it answers, and stopped by its PID.
package serverproc

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// OnFreePort runs start on a free port, and again on another one when it
// fails (another process may have taken the port in the meantime), at most
// attempts times. It returns start's last error.
func OnFreePort(attempts int, start func(port int) error) error {
	var err error
	for range attempts {
		var port int
		if port, err = FreePort(); err != nil {
			return err
		}
		if err = start(port); err == nil {
			return nil
		}
	}
	return err
}

// readyPoll is how often WaitReady asks.
const readyPoll = 10 * time.Millisecond

// Proc is a running child process.
type Proc struct {
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan struct{} // closed when cmd has been waited for
}

// Start starts cmd, keeping what it writes to its standard output and
// error (see Output), and waits for its exit in the background.
func Start(cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(cmd.Path), err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// WaitReady calls ready until it returns nil. When the process exits
// first, or ready has not succeeded within timeout (the process is then
// killed), it returns an error with the process's output and ready's last
// error.
func (p *Proc) WaitReady(timeout time.Duration, ready func() error) error {
	name := filepath.Base(p.cmd.Path)
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start-up (%s): %v\n%s", name, p.cmd.ProcessState, err, p.Output())
		case <-time.After(readyPoll):
		}
		if time.Now().After(deadline) {
			p.Stop(syscall.SIGKILL, 0)
			return fmt.Errorf("%s (PID %d) not ready within %v: %v\n%s", name, p.PID(), timeout, err, p.Output())
		}
	}
}

// Stop sends sig to the process by its PID and waits for it to exit,
// killing it (SIGKILL) if it has not within timeout. Stopping a process
// that has exited, or a nil *Proc, does nothing.
func (p *Proc) Stop(sig syscall.Signal, timeout time.Duration) {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Signal sends sig to the process (SIGSTOP to freeze it, SIGCONT to let
// it go on) and returns at once.
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// PID returns the process's ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Output returns what the process has written to its standard output and
// error so far.
func (p *Proc) Output() string { return p.out.String() }

// lockedBuffer is a bytes.Buffer that the process's output is copied into
// while Output may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
