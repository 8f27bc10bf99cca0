package fencing

import (
	"fmt"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// WithLockDelay sets the held lease's lock delay, in place of the
// Coordinator's WithDefaultLockDelay: should the lease end without a
// release by its holder (it expires because the holder crashed, stalled or
// was cut off, or an operator forces it out), no new grant on the key
// succeeds for d after that end, on the coordinator's clock (see
// backend.Request.LockDelay). That leaves a holder that is still running
// time to notice its loss (Held.Context ends at the lease's Deadline) and
// stop side effects that no fencing token guards: an e-mail, a call to a
// third-party API, a write to a store that cannot check tokens. A release by
// the holder (Held.Release, the end of Do, the parent context ending) frees
// the key at once.
//
// A Lock that waits for the key meanwhile sleeps out the delay's time left
// and tries once, instead of polling. d is zero (no delay, the default) up
// to backend.MaxLockDelay; any other gets an error wrapping
// ErrInvalidOption and ErrInvalidLockDelay, before any request.
func WithLockDelay(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) error {
		if err := backend.CheckLockDelay(d); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		c.lockDelay, c.grantOnly = d, "WithLockDelay"
		return nil
	})
}

// WithDefaultLockDelay sets the lock delay of every lease this Coordinator
// takes (Grant, Hold, Lock, Do) unless a call's WithLockDelay gives another:
// how long the key stays closed to new grants after such a lease ends
// without a release by its holder (see WithLockDelay). The default is none.
// A delay that backend.CheckLockDelay refuses (negative, over
// backend.MaxLockDelay) is refused (see Option).
//
// It is the way to give Grant a lock delay: Grant's variadic margin leaves
// no room for options, and a process usually protects all its keys alike.
func WithDefaultLockDelay(d time.Duration) Option {
	return func(c *config) {
		if err := backend.CheckLockDelay(d); err != nil {
			c.refuse("WithDefaultLockDelay", err)
			return
		}
		c.lockDelay = d
	}
}
