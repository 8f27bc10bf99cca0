package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pinShim is an LD_PRELOAD library that, while the file named by
// FENCING_CLOCK_PIN holds a number of microseconds since the epoch, makes
// the process's wall clock read exactly that instant (it stands still);
// with the file empty or absent the clock is the kernel's. As in
// clockShim, the kernel's clock is read with the raw system call, and
// monotonic clocks are left alone (the server's event loop runs on them).
const pinShim = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int pinned(struct timespec *ts) {
	const char *path = getenv("FENCING_CLOCK_PIN");
	if (!path) return 0;
	int fd = open(path, O_RDONLY);
	if (fd < 0) return 0;
	char buf[32];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return 0;
	buf[n] = 0;
	long long us = strtoll(buf, NULL, 10);
	if (us <= 0) return 0;
	ts->tv_sec = us / 1000000;
	ts->tv_nsec = (us % 1000000) * 1000;
	return 1;
}

static int realtime(clockid_t c) {
	return c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t c, struct timespec *ts) {
	if (realtime(c) && pinned(ts)) return 0;
	return syscall(SYS_clock_gettime, c, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	if (!pinned(&ts)) {
		int r = syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
		if (r != 0) return r;
	}
	if (tv) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (!pinned(&ts)) syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

// PinnedClock is a wall clock for a server that a test stops at the
// instant it chooses, to the microsecond: the server's TIME, and so its
// scripts' clock, reads that instant until the test moves or frees it.
type PinnedClock struct {
	path string
	env  []string
}

// NewPinnedClock compiles the clock-pinning LD_PRELOAD library with gcc.
// Run the server with its Env (Config.Env); the clock runs free until Pin.
// Without gcc it skips the test, or fails it when the CI environment
// variable is set.
func NewPinnedClock(t testing.TB) *PinnedClock {
	t.Helper()
	lib := buildShim(t, "pinned clock", "pinclock", pinShim)
	path := filepath.Join(filepath.Dir(lib), "pin")
	return &PinnedClock{path: path, env: []string{"LD_PRELOAD=" + lib, "FENCING_CLOCK_PIN=" + path}}
}

// Env is the environment that runs a server on this clock.
func (c *PinnedClock) Env() []string { return c.env }

// Pin stops the server's wall clock at at (to the microsecond) until the
// next Pin or Free.
func (c *PinnedClock) Pin(t testing.TB, at time.Time) {
	t.Helper()
	c.write(t, fmt.Sprint(at.UnixMicro()))
}

// Free lets the server's wall clock run with the kernel's again.
func (c *PinnedClock) Free(t testing.TB) {
	t.Helper()
	c.write(t, "")
}

// write replaces the file whole, so the server never reads half of it.
func (c *PinnedClock) write(t testing.TB, s string) {
	t.Helper()
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		t.Fatal(err)
	}
}
