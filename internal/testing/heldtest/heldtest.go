// Package heldtest checks when a held lease's context ends, in tests that
// must hold on a busy machine: against a timer armed for the lease's
// Deadline, so that the latency a loaded machine adds to every timer is
// not counted as the lease's lateness.
package heldtest

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// EndsAtDeadline waits up to bound past the lease's Deadline for h's context
// to end, and fails t unless it ended at the Deadline: not before it (less
// the clock's rounding), and no more than late after a timer of this
// package, armed for the Deadline (and re-armed whenever a confirmed
// renewal moves it), fired. It returns when the context ended.
func EndsAtDeadline(t testing.TB, h *fencing.Held, bound, late time.Duration) time.Time {
	t.Helper()
	ended := make(chan time.Time, 1)
	stop := context.AfterFunc(h.Context(), func() { ended <- time.Now() })
	defer stop()
	fired := make(chan time.Time, 1)
	var arm func(at time.Time)
	arm = func(at time.Time) {
		time.AfterFunc(time.Until(at), func() {
			if d := h.Lease().Deadline; d.After(at) {
				arm(d) // a renewal moved it: the timer that must fire is later
				return
			}
			select {
			case fired <- time.Now():
			default:
			}
		})
	}
	arm(h.Lease().Deadline)
	var end time.Time
	select {
	case end = <-ended:
	case <-time.After(time.Until(h.Lease().Deadline) + bound):
		t.Fatalf("the held lease's context did not end within %v of its Deadline %v", bound, h.Lease().Deadline)
	}
	deadline := h.Lease().Deadline
	if early := deadline.Sub(end); early > 10*time.Millisecond {
		t.Errorf("context ended %v before the Deadline with no verdict", early)
	}
	select {
	case f := <-fired:
		if d := end.Sub(f); d > late {
			t.Errorf("context ended %v after a timer set for the Deadline fired (%v after the Deadline)", d, f.Sub(deadline))
		}
	case <-time.After(time.Until(deadline) + bound):
		t.Errorf("the reference timer for the Deadline %v never fired", deadline)
	}
	return end
}
