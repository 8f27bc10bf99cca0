//go:build unix && !linux

package main

import (
	"os"
	"syscall"
)

// setDeathSignal does nothing: outside Linux the watchdog learns of its
// supervisor's death only from its control pipe.
func setDeathSignal(a *syscall.SysProcAttr) {}

// deathSignals is empty outside Linux.
var deathSignals []os.Signal

// selfPath is the file of this running program.
func selfPath() (string, error) { return os.Executable() }

// setCommandDeathSignal does nothing outside Linux.
func setCommandDeathSignal(a *syscall.SysProcAttr) {}

// stoppedProcess cannot tell here whether a process is stopped: the
// watchdog goes by its supervisor's silence alone.
func stoppedProcess(int) (stopped, known bool) { return false, false }
