package conformance

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// Timeouts that must outlast a renewal are derived from the store's round
// trip as observed now, so a loaded machine (or -race) lengthens them
// instead of failing a case that is not about expiry.

// latencyFactor is how many observed round trips a lease that must stay
// renewed lasts: a renewer needs one round trip per renewal, and a loaded
// host delays its timers by about as much as it delays the store.
const latencyFactor = 50

// roundTrip returns the median duration of a few grant and release calls
// on a fresh backend: what a store call costs on this host right now.
func (s suite) roundTrip(t *testing.T) time.Duration {
	t.Helper()
	c := fencing.New(s.backend(t))
	ctx := context.Background()
	var took []time.Duration
	for range 4 {
		start := time.Now()
		l, err := c.Grant(ctx, "round-trip", long)
		took = append(took, time.Since(start))
		if err != nil {
			t.Fatalf("Grant (measuring the round trip): %v", err)
		}
		start = time.Now()
		if err := c.Release(ctx, "round-trip", l.ID); err != nil {
			t.Fatalf("Release (measuring the round trip): %v", err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took[len(took)/2]
}

// renewedTTL returns a TTL of at least floor that a lease renewed in time
// lasts on this host: latencyFactor observed round trips.
func (s suite) renewedTTL(t *testing.T, floor time.Duration) time.Duration {
	t.Helper()
	rtt := s.roundTrip(t)
	ttl := max(floor, latencyFactor*rtt)
	t.Logf("store round trip %v: TTL %v", rtt, ttl)
	return ttl
}
