//go:build unix

package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// monoNow is CLOCK_MONOTONIC, in nanoseconds: one clock for every process of
// the machine, which wall-clock steps do not move.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("CLOCK_MONOTONIC: " + err.Error()) // every Unix Go runs on has it
	}
	return ts.Nano()
}

// monoAfter is the CLOCK_MONOTONIC reading d from now.
func monoAfter(d time.Duration) int64 { return monoNow() + int64(d) }

// monoUntil is the time left until the CLOCK_MONOTONIC reading n.
func monoUntil(n int64) time.Duration { return time.Duration(n - monoNow()) }
