package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
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

// keepsRenewed runs f, a case whose held lease must stay renewed for a
// while, on a fresh coordinator whose calls are recorded, with a TTL and
// margin from holdTTL. f returns the held lease's loss, nil when it kept
// the lease. A renewer needs each renewal cycle, from the send of the last
// confirmed grant or renewal to the answer of the next, to fit in the TTL;
// it plans about a third of it. A loss after a cycle that took at least
// half the TTL is this host's (a late timer, a slow store: a rejected
// renewal that arrived after the lease's end, or a Deadline that cut one
// off), not the backend's: f runs again with a TTL of four times the
// slowest cycle observed, up to three runs in all. A loss without such a
// cycle, or a renewal refused for an unknown lease, fails the case. Each
// run holds a key of its own: key, then key-2 and key-3.
func (s suite) keepsRenewed(t *testing.T, key string, f func(c *fencing.Coordinator, key string, ttl, margin time.Duration) error) {
	t.Helper()
	s.keepsRenewedOn(t, s.backend, key, f)
}

// keepsRenewedOn is keepsRenewed on backends from newBackend.
func (s suite) keepsRenewedOn(t *testing.T, newBackend func(*testing.T) backend.Backend, key string, f func(c *fencing.Coordinator, key string, ttl, margin time.Duration) error) {
	t.Helper()
	ttl, margin := s.holdTTL(t)
	for run := 1; ; run++ {
		rec := NewRecorder(nil)
		k := key
		if run > 1 {
			k = fmt.Sprintf("%s-%d", key, run)
		}
		loss := f(fencing.New(rec.Wrap(newBackend(t))), k, ttl, margin)
		if loss == nil {
			return
		}
		slowest := slowestRenewalCycle(rec.History(), ttl)
		if errors.Is(loss, fencing.ErrLeaseNotFound) || slowest < ttl/2 || run == 3 {
			t.Fatalf("run %d, TTL %v: the held lease was lost: %v (slowest renewal cycle observed %v)", run, ttl, loss, slowest)
		}
		t.Logf("run %d, TTL %v: the held lease was lost after a renewal cycle of %v on this host (%v); again with a TTL of %v",
			run, ttl, slowest, loss, 4*slowest)
		ttl = max(ttl, 4*slowest)
		margin = ttl / 4
	}
}

// slowestRenewalCycle returns the longest time in history from the send of
// a successful grant (GrantMany's too) or renewal to the answer of the next call renewing
// the same lease, or to the send of its release (a holder that let its lease
// end unrenewed before it released it). A lease of ttl whose last confirmed
// request was followed by no call at all (its renewer never got to send a
// renewal before its Deadline: a host too slow to run it, as the backend
// was not asked) counts as a cycle of ttl.
func slowestRenewalCycle(history []Op, ttl time.Duration) time.Duration {
	slices.SortFunc(history, func(a, b Op) int { return a.Call.Compare(b.Call) })
	sent := make(map[string]time.Time) // lease ID -> send of its last confirmed grant or renewal
	unsent := make(map[string]bool)    // lease ID -> no call since its last confirmed one
	var slowest time.Duration
	for _, op := range history {
		if op.Kind == OpGrantMany && op.Err == nil {
			for _, r := range op.Requests {
				sent[r.LeaseID] = op.Call
				unsent[r.LeaseID] = true
			}
		}
		if op.Kind == OpRelease {
			if last, ok := sent[op.LeaseID]; ok {
				slowest = max(slowest, op.Call.Sub(last))
			}
			delete(unsent, op.LeaseID)
			continue
		}
		if op.Kind != OpGrant && op.Kind != OpRenew {
			continue
		}
		if last, ok := sent[op.LeaseID]; ok && op.Kind == OpRenew {
			slowest = max(slowest, op.Return.Sub(last))
		}
		delete(unsent, op.LeaseID)
		if op.Err == nil {
			sent[op.LeaseID] = op.Call
			unsent[op.LeaseID] = true
		}
	}
	if len(unsent) > 0 {
		slowest = max(slowest, ttl)
	}
	return slowest
}
