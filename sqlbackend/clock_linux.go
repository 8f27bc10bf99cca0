package sqlbackend

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME and the boot ID.
func bootClock() (string, time.Duration, bool) {
	id := bootID()
	if id == "" {
		return "", 0, false
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, false
	}
	return id, time.Duration(ts.Nano()), true
}
