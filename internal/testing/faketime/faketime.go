// Package faketime runs a child process on a wall clock offset from the
// system's, and steps that clock while it runs, with Debian's libfaketime
// preloaded: for a C server (PostgreSQL) whose clock decides expiries.
// Only the wall clock moves; the monotonic clock stays the system's, as
// when NTP or an operator steps a host's clock.
//
// libfaketime breaks redis-server (its event loop spins); for Redis, see
// redistest's clock.
//
// When libfaketime is not installed, New skips the test, except in CI (the
// CI environment variable is set), where it fails.
package faketime

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Library is where Debian's libfaketime package installs the library.
const Library = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

// Clock is an offset from the system's wall clock, kept in a file that the
// processes started with Env read at every clock call.
type Clock struct {
	dir string
}

// New returns a Clock at offset from the system's wall clock, whose file
// is removed when t ends.
func New(t testing.TB, offset time.Duration) *Clock {
	t.Helper()
	if _, err := os.Stat(Library); err != nil {
		msg := fmt.Sprintf("faketime: no libfaketime at %s", Library)
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: it is required in CI", msg)
		}
		t.Skipf("%s (install Debian's libfaketime package)", msg)
	}
	// Readable by a server that runs as another user (PostgreSQL's).
	dir, err := os.MkdirTemp("", "faketime-")
	if err != nil {
		t.Fatalf("faketime: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("faketime: %v", err)
	}
	c := &Clock{dir: dir}
	if err := c.Set(offset); err != nil {
		t.Fatalf("faketime: %v", err)
	}
	return c
}

func (c *Clock) file() string { return filepath.Join(c.dir, "offset") }

// Env returns the environment entries that start a dynamically linked
// program on c: add them to its exec.Cmd's Env.
func (c *Clock) Env() []string {
	return []string{
		"LD_PRELOAD=" + Library,
		"FAKETIME_TIMESTAMP_FILE=" + c.file(),
		"FAKETIME_NO_CACHE=1", // a Set is seen at the next clock call
		"DONT_FAKE_MONOTONIC=1",
	}
}

// Set steps c's processes' wall clock to offset from the system's, at
// once (forward or back). It replaces the file in one rename, so that no
// process reads it half written.
func (c *Clock) Set(offset time.Duration) error {
	tmp := c.file() + ".new"
	// libfaketime's relative form: seconds with a sign.
	spec := fmt.Sprintf("%+.6f\n", offset.Seconds())
	if err := os.WriteFile(tmp, []byte(spec), 0o644); err != nil {
		return fmt.Errorf("faketime: %w", err)
	}
	if err := os.Rename(tmp, c.file()); err != nil {
		return fmt.Errorf("faketime: %w", err)
	}
	return nil
}
