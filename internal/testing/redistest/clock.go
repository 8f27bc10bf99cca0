package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// clockShim is an LD_PRELOAD library that moves the process's wall clock
// by FENCING_CLOCK_OFFSET seconds (may be negative): it overrides
// clock_gettime for the realtime clocks, gettimeofday and time, reading the
// kernel's clock with the raw system call, so it never calls back into
// itself (libfaketime's recursion makes Debian's redis-server fail at
// start-up). Monotonic clocks are left alone.
const clockShim = `#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long offset(void) {
	static long off = 0;
	static int done = 0;
	if (!done) {
		const char *s = getenv("FENCING_CLOCK_OFFSET");
		off = s ? atol(s) : 0;
		done = 1;
	}
	return off;
}

static int realtime(clockid_t c) {
	return c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t c, struct timespec *ts) {
	int r = syscall(SYS_clock_gettime, c, ts);
	if (r == 0 && realtime(c)) ts->tv_sec += offset();
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	int r = syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
	if (r != 0) return r;
	if (tv) {
		tv->tv_sec = ts.tv_sec + offset();
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
	time_t now = ts.tv_sec + offset();
	if (t) *t = now;
	return now;
}
`

// ClockShim compiles the clock-shifting LD_PRELOAD library with gcc and
// returns the environment that runs a server offset from this machine's
// wall clock (Config.Env). Without gcc it skips the test, or fails it when
// the CI environment variable is set.
func ClockShim(t testing.TB, offset time.Duration) []string {
	t.Helper()
	lib := buildShim(t, "clock shim", "clockshim", clockShim)
	return []string{"LD_PRELOAD=" + lib, fmt.Sprintf("FENCING_CLOCK_OFFSET=%d", int64(offset/time.Second))}
}

// buildShim compiles src, C for an LD_PRELOAD library, with gcc into t's
// temporary directory as name.so and returns its path. Without gcc it skips
// the test, or fails it when the CI environment variable is set; what names
// the library in those messages.
func buildShim(t testing.TB, what, name, src string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redistest: gcc is needed for the %s: %v", what, err)
		}
		t.Skipf("redistest: no gcc to build the %s: %v", what, err)
	}
	dir := t.TempDir()
	c, lib := filepath.Join(dir, name+".c"), filepath.Join(dir, name+".so")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-o", lib, c).CombinedOutput(); err != nil {
		t.Fatalf("redistest: build the %s: %v\n%s", what, err, out)
	}
	return lib
}
