package memorybackend

import (
	"sync/atomic"
	"time"
)

// monotonic guards the backend against a Clock that goes backwards (a
// stepped wall clock, a test clock set back): it never reads earlier than
// the latest time it has read. Without it a lease that had expired could
// come back to life, and a holder told "expired" could be told "live" again.
// A backward step is absorbed: time stands still until the clock catches
// up. Tokens do not depend on the clock, so none is ever reissued either way.
type monotonic struct {
	c    Clock
	last atomic.Pointer[time.Time] // the latest reading
}

func (m *monotonic) Now() time.Time {
	t := m.c.Now()
	for {
		last := m.last.Load()
		if last != nil && !t.After(*last) {
			return *last
		}
		next := t // only a reading that moves time on is stored
		if m.last.CompareAndSwap(last, &next) {
			return t
		}
	}
}

// Clock is the coordinator's clock: the only clock the in-memory backend
// reads to decide expiry.
//
// Without WithClock the backend reads the system's monotonic clock, anchored
// at the wall time the backend was made: expiry never jumps when the wall
// clock is stepped, and a reading costs one clock read instead of two.
type Clock interface {
	Now() time.Time
}

// FakeClock is a Clock that moves only when told to. Use it to test lease
// expiry instantly, in this package's tests or your own. It is safe for
// concurrent use.
type FakeClock struct {
	start   time.Time
	elapsed atomic.Int64 // nanoseconds since start
}

// NewFakeClock returns a FakeClock that reads start until advanced.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{start: start}
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	return c.start.Add(time.Duration(c.elapsed.Load()))
}

// Advance moves the clock forward by d. A negative d is ignored: the
// coordinator's clock never runs backwards.
func (c *FakeClock) Advance(d time.Duration) {
	if d > 0 {
		c.elapsed.Add(int64(d))
	}
}
