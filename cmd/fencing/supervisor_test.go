//go:build linux

package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The commands hold, elect and sem run print the lease's key and their own
// PID, then run until stopped; ignoringTERM ignores SIGTERM (its sleeps
// inherit that).
const (
	obeyingTERM  = `echo "$FENCING_KEY"; echo $$; while :; do sleep 0.05; done`
	ignoringTERM = `trap "" TERM; echo "$FENCING_KEY"; echo $$; while :; do sleep 0.05; done`
)

// alive reports whether process pid runs: it exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command's name in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// goneBy waits until process pid no longer runs and returns when it saw
// it gone; it fails the test if pid still runs at limit.
func goneBy(t *testing.T, pid int, limit time.Time) time.Time {
	t.Helper()
	for alive(pid) {
		if time.Now().After(limit) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command (PID %d) still runs at the limit", pid)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Now()
}

// supervised starts a supervisor (hold, elect or sem) of script and
// returns it with the lease's key and the command's PID once the command
// runs.
func supervised(t *testing.T, args []string, script string) (p *proc, key string, pid int) {
	t.Helper()
	p = start(t, append(args, "--", "sh", "-c", script)...)
	key = p.line(time.Minute)
	pid, err := strconv.Atoi(p.line(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return p, key, pid
}

// TestCommandEndsWithItsSupervisor: a hold, elect or sem killed with
// SIGKILL takes its command with it, before the lease's Deadline and
// before the next holder gets the key.
func TestCommandEndsWithItsSupervisor(t *testing.T) {
	const ttl = 6 * time.Second
	for _, c := range []struct {
		name   string
		args   []string
		script string
	}{
		{"hold", []string{"hold", "k", "--ttl", ttl.String()}, obeyingTERM},
		{"elect", []string{"elect", "k", "--ttl", ttl.String()}, obeyingTERM},
		{"sem", []string{"sem", "k", "--size", "1", "--ttl", ttl.String()}, obeyingTERM},
		// With --grace longer than the lease, SIGKILL comes before the
		// lease's deadline instead.
		{"hold-ignoring-SIGTERM", []string{"hold", "k", "--ttl", ttl.String(), "--grace", "1m"}, ignoringTERM},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := []string{"--sqlite-path", filepath.Join(t.TempDir(), "cli.db")}
			// The lease's Deadline is no earlier than ttl after the
			// supervisor started: its grant was sent later.
			started := time.Now()
			p, key, pid := supervised(t, append(c.args, db...), c.script)
			killed := time.Now()
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			gone := goneBy(t, pid, started.Add(ttl))
			t.Logf("the command ended %v after its supervisor's SIGKILL (the lease had at least %v left)",
				gone.Sub(killed).Round(time.Millisecond), started.Add(ttl).Sub(killed).Round(time.Millisecond))

			next := start(t, append([]string{"hold", key, "--wait", "--ttl", "1s"}, append(db, "--", "echo", "got")...)...)
			if l := next.line(time.Minute); l != "got" {
				t.Fatalf("the next holder printed %q", l)
			}
			if got := time.Now(); alive(pid) || got.Before(gone) {
				t.Errorf("the next holder got the key while the first command ran")
			}
			p.wait(time.Minute) // its stderr, which the watchdog shares, is complete
			// On Linux the watchdog learns of the death twice (the death
			// signal, the pipe's end): it says so once.
			if want := c.args[0] + " died; stopping its command"; strings.Count(p.errb.String(), want) != 1 {
				t.Errorf("stderr does not say %q once:\n%s", want, p.errb.String())
			}
		})
	}
}

// alone is the next holder's command: it prints "alone" if process $1
// no longer runs (gone, or a zombie), else "beside".
const alone = `s=$(cut -d' ' -f3 /proc/$1/stat 2>/dev/null); if [ -z "$s" ] || [ "$s" = Z ]; then echo alone; else echo beside; fi`

// TestCommandEndsWithFrozenSupervisor: a hold, elect or sem frozen by
// SIGSTOP renews nothing; its command ends before the lease's Deadline all
// the same, even one that ignores SIGTERM (with the default --grace, 10s),
// and so before the next holder gets the key.
func TestCommandEndsWithFrozenSupervisor(t *testing.T) {
	const ttl = 6 * time.Second
	for _, c := range []struct {
		name   string
		args   []string
		script string
	}{
		{"hold", []string{"hold", "k", "--ttl", ttl.String()}, obeyingTERM},
		{"hold-ignoring-SIGTERM", []string{"hold", "k", "--ttl", ttl.String()}, ignoringTERM},
		{"elect-ignoring-SIGTERM", []string{"elect", "k", "--once", "--ttl", ttl.String()}, ignoringTERM},
		{"sem-ignoring-SIGTERM", []string{"sem", "k", "--size", "1", "--ttl", ttl.String()}, ignoringTERM},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := []string{"--sqlite-path", filepath.Join(t.TempDir(), "cli.db")}
			p, key, pid := supervised(t, append(c.args, db...), c.script)
			stopped := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.cmd.Process.Signal(syscall.SIGCONT) })
			// The next holder waits for the key, and checks when it has it
			// that the first command is gone.
			next := start(t, append([]string{"hold", key, "--wait", "--ttl", "1s"}, append(db, "--", "sh", "-c", alone, "sh", strconv.Itoa(pid))...)...)
			// The last renewal was sent before the SIGSTOP: the lease's
			// Deadline is at most ttl later.
			gone := goneBy(t, pid, stopped.Add(ttl))
			t.Logf("the command ended %v after its supervisor's SIGSTOP (the lease's Deadline was at most %v after it)",
				gone.Sub(stopped).Round(time.Millisecond), ttl)
			if l := next.line(time.Minute); l != "alone" {
				t.Errorf("the next holder's command printed %q: it got the key while the first command ran", l)
			}
			if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(time.Minute); code != exitLost {
				t.Errorf("%s exited %d after it woke, want %d (lost); stderr:\n%s", c.args[0], code, exitLost, p.errb.String())
			}
			if want := c.args[0] + " has been silent for"; !strings.Contains(p.errb.String(), want) {
				t.Errorf("stderr does not say %q:\n%s", want, p.errb.String())
			}
		})
	}
}

// TestCommandEndsWithItsSupervisorsGroup: SIGKILL to the whole process
// group of hold (a shell's job, a service manager) spares the watchdog,
// which stops the command.
func TestCommandEndsWithItsSupervisorsGroup(t *testing.T) {
	const ttl = 6 * time.Second
	started := time.Now()
	c := exec.Command(binary, "hold", "k", "--ttl", ttl.String(), "--sqlite-path", filepath.Join(t.TempDir(), "cli.db"),
		"--", "sh", "-c", obeyingTERM)
	c.Env = cleanEnv()
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	defer syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	r := bufio.NewReader(out)
	r.ReadString('\n') // the key
	line, err := r.ReadString('\n')
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		t.Fatalf("the command printed %q: %v", line, err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	killed := time.Now()
	if err := syscall.Kill(-c.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gone := goneBy(t, pid, started.Add(ttl))
	t.Logf("the command ended %v after its supervisor's group was killed", gone.Sub(killed).Round(time.Millisecond))
}

// TestCommandEndsWithItsWatchdog: on Linux, a watchdog killed with SIGKILL
// takes the command with it, and hold, which sees its child gone, does not
// release the lease under a running command.
func TestCommandEndsWithItsWatchdog(t *testing.T) {
	db := []string{"--sqlite-path", filepath.Join(t.TempDir(), "cli.db")}
	p, _, pid := supervised(t, append([]string{"hold", "k", "--ttl", "6s"}, db...), `echo "$FENCING_KEY"; echo $PPID; echo $$; exec sleep 600`)
	// pid is the watchdog's: the command's parent.
	cmdPID, err := strconv.Atoi(p.line(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(cmdPID, syscall.SIGKILL)
	killed := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	gone := goneBy(t, cmdPID, killed.Add(30*time.Second))
	t.Logf("the command ended %v after its watchdog's SIGKILL", gone.Sub(killed).Round(time.Millisecond))
	p.wait(time.Minute)
}
