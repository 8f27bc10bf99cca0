package fencing

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
