package fencing

import (
	"strings"
	"testing"
	"time"
)

// TestSendClock checks that sendClock reads as time.Now does: a monotonic
// reading between the time.Now calls around it, and a wall reading within
// a millisecond of theirs, and that it takes a fresh time.Now once its base
// is clockRefresh old.
func TestSendClock(t *testing.T) {
	var c sendClock
	for i := range 1000 {
		before := time.Now()
		got := c.now()
		after := time.Now()
		if got.Before(before) || got.After(after) {
			t.Fatalf("reading %d: %v, not within [%v, %v]", i, got, before, after)
		}
		if !strings.Contains(got.String(), " m=") {
			t.Fatalf("reading %d: %v has no monotonic clock reading", i, got)
		}
		if w := got.Round(0); w.Before(before.Round(0).Add(-time.Millisecond)) || w.After(after.Round(0).Add(time.Millisecond)) {
			t.Fatalf("reading %d: wall clock %v, not within a millisecond of [%v, %v]", i, w, before.Round(0), after.Round(0))
		}
	}
	old := time.Now().Add(-2 * clockRefresh)
	c.base.Store(&old)
	before := time.Now()
	c.now()
	if b := c.base.Load(); b.Before(before) {
		t.Errorf("base %v, %v old, was not refreshed", *b, time.Since(*b))
	}
}
