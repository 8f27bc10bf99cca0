package kubebackend

import (
	"testing"
	"time"
)

// TestObserveKeepsPreviousState: a read that returns a Lease's state after
// the backend observed the next one (the read was served before the write)
// gets that state's first sighting, not the time of the late read; a state
// older than both is timed from now, and never replaces the newer one.
func TestObserveKeepsPreviousState(t *testing.T) {
	b := &Backend{seen: make(map[string]observation)}
	t0 := time.Now()
	if got := b.observe("l", "10", t0); !got.Equal(t0) {
		t.Fatalf("first sighting of 10 = %v, want %v", got, t0)
	}
	t1 := t0.Add(time.Second)
	b.observeWrite("l", "12", t1) // a release written by this backend
	t2 := t0.Add(2 * time.Second)
	if got := b.observe("l", "10", t2); !got.Equal(t0) {
		t.Fatalf("state 10 read late, after 12 was observed: first seen %v, want %v (its first sighting)", got.Sub(t0), time.Duration(0))
	}
	if got := b.observe("l", "12", t2); !got.Equal(t1) {
		t.Fatalf("state 12 first seen %v after t0, want %v", got.Sub(t0), t1.Sub(t0))
	}
	if got := b.observe("l", "9", t2); !got.Equal(t2) {
		t.Fatalf("state 9, older than both: first seen %v after t0, want now (%v)", got.Sub(t0), t2.Sub(t0))
	}
	if got := b.observe("l", "12", t2.Add(time.Second)); !got.Equal(t1) {
		t.Fatalf("after reading 9, state 12 first seen %v after t0, want %v: an older state replaced it", got.Sub(t0), t1.Sub(t0))
	}
}
