//go:build !linux

package sqlbackend

import "time"

// bootClock has no boot clock to read outside Linux.
func bootClock() (string, time.Duration, bool) { return "", 0, false }
