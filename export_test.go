package fencing

import "time"

// IsGlobalDelegate exposes isGlobalDelegate to the tests of package
// fencing_test.
var IsGlobalDelegate = isGlobalDelegate

// LateExpiry stops h's expiry timer, as a timer that has yet to run when
// its holder does (a process frozen past the Deadline, a starved timer
// goroutine); fire runs it late.
func LateExpiry(h *Held) (fire func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expiry.Stop()
	return h.expire
}

// PastDeadline moves h's clock on to d past its lease's current Deadline,
// as a holder run again after a freeze sees it, while the real clock (its
// expiry timer, its renewer's sleeps, its requests' deadlines) stays where
// it was: no timer races the holder's look.
func PastDeadline(h *Held, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	skew := time.Until(h.lease.Deadline) + d
	h.until = func(t time.Time) time.Duration { return time.Until(t) - skew }
}

// ConfirmRenewal records l as h's confirmed renewal, as the renewer does
// with a renewal's answer, and reports whether the lease goes on.
func ConfirmRenewal(h *Held, l Lease) bool { return h.confirm(l) }
