package fencing

import (
	"sync/atomic"
	"time"
)

// clockRefresh is how old the wall-clock reading of a sendClock may be.
const clockRefresh = time.Second

// sendClock reads the local clock for the moment a request leaves, from
// which its Deadline counts. time.Now reads two clocks, the wall clock and
// the monotonic one, which costs more than reading the monotonic one alone;
// the monotonic reading is what Deadline is compared by, and the wall
// reading is only what a Deadline prints as.
type sendClock struct {
	base atomic.Pointer[time.Time] // a time.Now at most clockRefresh old
}

// now returns the current time: its monotonic reading is read now, and its
// wall reading is that of a time.Now at most clockRefresh old plus the
// monotonic time since (so it is off only by a step of the wall clock
// within the last clockRefresh).
func (c *sendClock) now() time.Time {
	if b := c.base.Load(); b != nil {
		if d := time.Since(*b); d >= 0 && d < clockRefresh {
			return b.Add(d)
		}
	}
	t := time.Now()
	c.base.Store(&t)
	return t
}
