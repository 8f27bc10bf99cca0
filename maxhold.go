package fencing

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// WithMaxHold caps how long Hold, Lock and Do hold the lease in all: d
// counts from the moment the grant that made the lease held was sent (the
// moment its Deadline counts from; for Lock, the grant that got the key,
// not the start of the wait). No grant or renewal asks for more than the
// time left until the grant's send plus d, so the lease's Deadline never
// passes that moment: the last renewal is shortened to the time left, and
// with d at most the TTL the grant itself asks for d and is never renewed.
// WithWarning still warns before that last Deadline.
//
// At that Deadline the held lease's Context ends with an error wrapping
// ErrLeaseLost and ErrMaxHold, and Err returns it. Then, in that order, the
// lease is released rather than left to expire, so the next holder gets the
// key without waiting out the TTL and the margin: until that release is
// answered (a round trip), the coordinator still reports the lease live
// (Token, CheckToken, Inspect). The Context does not wait for the release,
// which would end it late, and the release is not sent before the
// Deadline, which would cut the hold short. The loss is counted in
// MetricLeasesLost with reason "max_hold" and logged like any other loss.
// A lease lost earlier (a rejected renewal, a Deadline passed without a
// confirmed renewal) is lost for that reason, as without the cap. After
// the last renewal nothing is sent until the cap, so a lease broken in
// that stretch (ForceRelease) is reported at its Deadline as the cap.
//
// It stops a holder whose work is wedged while its renewer still runs from
// keeping the key forever. d must be at least backend.MinTimeout.
func WithMaxHold(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) error {
		if d < backend.MinTimeout {
			return fmt.Errorf("%w: maximum hold %v is below the minimum %v", ErrInvalidOption, d, backend.MinTimeout)
		}
		c.maxHold = d
		return nil
	})
}

// holdCap is a Held's cap on its whole hold. Its fields are guarded by the
// Held's mu.
type holdCap struct {
	end     time.Time // the grant's send time plus the cap; zero: no cap
	reached bool      // no renewal will be sent: the lease ends at its Deadline
	// The release at the cap: its cancel while it runs, and whether the
	// holder's Release came first (which then releases the lease itself,
	// bounded by its own context).
	releasing      context.CancelFunc
	holderReleased bool
}

// holderReleases is called by Held.Release, with the Held's mu held: the
// release at the cap, if any, is no longer needed.
func (m *holdCap) holderReleases() {
	m.holderReleased = true
	if m.releasing != nil {
		m.releasing()
	}
}

// newHoldCap returns the cap of a held lease just granted: the grant was
// sent the grant's timeout before its Deadline.
func newHoldCap(lease Lease, ttl time.Duration, cfg holdConfig) holdCap {
	if cfg.maxHold == 0 {
		return holdCap{}
	}
	end := lease.Deadline.Add(cfg.maxHold - cfg.grantTimeout(ttl))
	return holdCap{end: end, reached: !lease.Deadline.Before(end)}
}

// clamp returns l with its Deadline at most the cap's end (a renewal that
// asked for the time left was sent a moment after that was read), and
// marks the cap reached when l's Deadline is there.
func (m *holdCap) clamp(l Lease) Lease {
	if m.end.IsZero() {
		return l
	}
	if !l.Deadline.Before(m.end) {
		l.Deadline = m.end
		m.reached = true
	}
	return l
}

// err is the loss at the cap d.
func (m *holdCap) err(d time.Duration) error {
	return fmt.Errorf("%w: %w (%v after the grant was sent)", ErrLeaseLost, ErrMaxHold, d)
}
