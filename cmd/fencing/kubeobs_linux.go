package main

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

var (
	bootIDOnce sync.Once
	bootIDText string
)

// bootClock reads the boot ID and CLOCK_BOOTTIME, the clock every process
// of this boot shares, which counts a suspend too.
func bootClock() (string, time.Duration, bool) {
	bootIDOnce.Do(func() {
		if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
			bootIDText = strings.TrimSpace(string(b))
		}
	})
	if bootIDText == "" {
		return "", 0, false
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, false
	}
	return bootIDText, time.Duration(ts.Nano()), true
}

// lockFile takes fh's flock, exclusive or shared, waiting for it.
func lockFile(fh *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	return unix.Flock(int(fh.Fd()), how)
}
