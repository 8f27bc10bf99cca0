package sqlbackend

import (
	"os"
	"strings"
	"sync"
	"time"
)

// HostClock is the coordinator's clock on SQLite: the clock of the host
// whose processes share the database file. The backend reads it after it
// has taken the database's write lock, so a request is dated when it is
// processed.
//
// A lease's end is stored as a reading of SinceBoot together with the boot
// it belongs to, never as a wall-clock time: stepping the wall clock (an
// operator, NTP, a VM resumed) neither extends nor shortens a live lease. A
// lease stored under another boot ID is expired: every process that could
// have held it ended with that boot.
type HostClock interface {
	// Now returns the current boot's ID, the time since boot on a clock
	// that wall-clock steps do not move and that keeps counting while the
	// host is suspended, and the wall-clock time, which is used only to
	// report Lease.ExpiresAt.
	Now() (bootID string, sinceBoot time.Duration, wall time.Time)
}

// SystemClock returns the host's clock. On Linux it is CLOCK_BOOTTIME with
// the kernel's boot ID (/proc/sys/kernel/random/boot_id). Elsewhere there is
// no such pair this package can read, and it falls back to the wall clock
// (nanoseconds since the Unix epoch, one constant boot ID): there a step of
// the wall clock does move lease ends, by the step.
func SystemClock() HostClock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() (string, time.Duration, time.Time) {
	boot, since, ok := bootClock()
	wall := time.Now()
	if !ok {
		return "wall-clock", time.Duration(wall.UnixNano()), wall
	}
	return boot, since, wall
}

var (
	bootIDOnce sync.Once
	bootIDText string
)

// bootID reads the kernel's boot ID once per process; it changes only with
// a reboot, which ends the process.
func bootID() string {
	bootIDOnce.Do(func() {
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err == nil {
			bootIDText = strings.TrimSpace(string(b))
		}
	})
	return bootIDText
}
