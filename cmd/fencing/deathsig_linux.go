package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// deathSignal is the signal the kernel sends the watchdog when its
// supervisor dies (Pdeathsig).
const deathSignal = syscall.SIGUSR1

// setDeathSignal asks the kernel to send deathSignal to the watchdog when
// the thread that starts it ends.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = deathSignal }

// deathSignals are the signals the watchdog takes for its supervisor's
// death.
var deathSignals = []os.Signal{deathSignal}

// selfPath is the file of this running program, even if it has been
// replaced or removed since it started.
func selfPath() (string, error) { return "/proc/self/exe", nil }

// setCommandDeathSignal has the kernel kill the command should its watchdog
// die.
func setCommandDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// stoppedProcess reports whether process pid is stopped (SIGSTOP, or at a
// debugger's breakpoint), and whether that could be read at all.
func stoppedProcess(pid int) (stopped, known bool) {
	if pid <= 0 {
		return false, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, false
	}
	// The state follows the command's name, in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false, false
	}
	return b[i+2] == 'T' || b[i+2] == 't', true
}
