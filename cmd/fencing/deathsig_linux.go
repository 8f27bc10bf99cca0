package main

import (
	"os"
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
