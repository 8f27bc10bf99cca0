package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// event is one completed operation of the randomized history. Grants,
// renewals and live token reads prove that the lease with token was live at
// some moment in [start, end]; a successful grant or renewal also proves it
// stays live until `until`; a release (what == "release") may end it from
// start on.
type event struct {
	key        string
	token      uint64
	id         string // the lease ID, for grants
	what       string
	start, end time.Time // real time
	// endCoord is end on the clock that until is on: the coordinator's
	// clock when the harness can read it, else real time.
	endCoord time.Time
	// until: the lease is live at least until then: ExpiresAt on a
	// readable coordinator clock, else the holder's Deadline.
	until time.Time
}

// testRandomHistory runs several goroutines doing random grants, renewals,
// releases and checks over a few keys while time passes, and then checks the
// history: no token issued twice on a key, tokens in real-time order, and
// never two live leases on one key at once.
func (s suite) testRandomHistory(t *testing.T) {
	c, _ := s.coordinator(t)
	keys := []string{"h0", "h1", "h2"}
	const workers = 6
	opsPerWorker := 300
	timeout, margin := 40*time.Millisecond, 10*time.Millisecond
	pause := 15 * time.Millisecond
	deadline := time.Now().Add(time.Hour)
	if s.traits.Now == nil {
		timeout, margin = s.short()
		pause = timeout / 4
		deadline = time.Now().Add(4*(timeout+margin) + 2*time.Second)
	}

	var (
		mu     sync.Mutex
		events []event
	)
	coordNow, exact := s.traits.Now, s.traits.Now != nil
	if !exact {
		coordNow = time.Now
	}
	until := func(l fencing.Lease) time.Time {
		if exact {
			return l.ExpiresAt
		}
		return l.Deadline
	}
	record := func(e event) {
		e.end, e.endCoord = time.Now(), coordNow()
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			ctx := context.Background()
			held := make(map[string]fencing.Lease) // what this worker believes it holds
			for op := 0; op < opsPerWorker && time.Now().Before(deadline); op++ {
				key := keys[rng.IntN(len(keys))]
				start := time.Now()
				switch r := rng.IntN(10); {
				case r < 3:
					lease, err := c.Grant(ctx, key, timeout, margin)
					switch {
					case err == nil:
						held[key] = lease
						record(event{key: key, token: lease.Token, id: lease.ID, start: start, until: until(lease), what: "grant"})
					case errors.Is(err, fencing.ErrLeaseHeld):
					default:
						t.Errorf("Grant(%q): %v", key, err)
					}
				case r < 5:
					lease, ok := held[key]
					if !ok {
						continue
					}
					renewed, err := c.Renew(ctx, key, lease.ID, timeout, margin)
					switch {
					case err == nil:
						if renewed.Token != lease.Token {
							t.Errorf("Renew(%q) changed token %d -> %d", key, lease.Token, renewed.Token)
						}
						record(event{key: key, token: lease.Token, start: start, until: until(renewed), what: "renew"})
					case errors.Is(err, fencing.ErrLeaseExpired), errors.Is(err, fencing.ErrLeaseNotFound):
						delete(held, key)
					default:
						t.Errorf("Renew(%q): %v", key, err)
					}
				case r < 6:
					lease, ok := held[key]
					if !ok {
						continue
					}
					delete(held, key)
					record(event{key: key, token: lease.Token, start: start, what: "release"})
					err := c.Release(ctx, key, lease.ID)
					if err != nil && !errors.Is(err, fencing.ErrLeaseExpired) && !errors.Is(err, fencing.ErrLeaseNotFound) {
						t.Errorf("Release(%q): %v", key, err)
					}
				case r < 9:
					tok, live, err := c.Token(ctx, key)
					if err != nil {
						t.Errorf("Token(%q): %v", key, err)
					} else if live {
						record(event{key: key, token: tok, start: start, what: "token"})
					}
				default:
					if err := s.h.Wait(ctx, time.Duration(rng.Int64N(int64(pause)))); err != nil {
						t.Errorf("Wait: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := checkHistory(events); err != nil {
		t.Fatal(err)
	}
	grants := 0
	for _, e := range events {
		if e.what == "grant" {
			grants++
		}
	}
	if grants < len(keys) {
		t.Fatalf("only %d grants succeeded in the randomized history; it tested nothing", grants)
	}
	t.Logf("checked %d events, %d grants", len(events), grants)
}

// checkHistory returns an error describing the first violation in events:
// a token granted twice on a key; a grant that finished before another
// started yet got the larger token; a lease seen live after a later lease on
// the same key had been seen live (leases are intervals that begin at their
// grant, so both were live at once); or a grant that succeeded while an
// earlier lease was certainly still live (before its until, unreleased).
func checkHistory(events []event) error {
	byKey := make(map[string][]event)
	for _, e := range events {
		byKey[e.key] = append(byKey[e.key], e)
	}
	for key, evs := range byKey {
		grants := make(map[uint64]event)
		liveUntil := make(map[uint64]event)    // the success with the latest until, per token
		released := make(map[uint64]time.Time) // when a release of the token began
		for _, e := range evs {
			switch e.what {
			case "grant":
				if prev, dup := grants[e.token]; dup {
					return fmt.Errorf("key %q: token %d granted twice (lease IDs %q and %q)", key, e.token, prev.id, e.id)
				}
				grants[e.token] = e
			case "release":
				if r, ok := released[e.token]; !ok || e.start.Before(r) {
					released[e.token] = e.start
				}
				continue
			}
			if e.what != "token" {
				if cur, ok := liveUntil[e.token]; !ok || e.until.After(cur.until) {
					liveUntil[e.token] = e
				}
			}
		}
		for _, e := range evs {
			if _, ok := grants[e.token]; !ok {
				return fmt.Errorf("key %q: %s saw token %d, which no grant returned", key, e.what, e.token)
			}
		}
		// Real-time order of grants.
		ordered := make([]event, 0, len(grants))
		for _, g := range grants {
			ordered = append(ordered, g)
		}
		sort.Slice(ordered, func(i, j int) bool { return ordered[i].token < ordered[j].token })
		for i := range ordered {
			for j := i + 1; j < len(ordered); j++ {
				if ordered[j].end.Before(ordered[i].start) {
					return fmt.Errorf("key %q: grant of token %d finished before the grant of smaller token %d began", key, ordered[j].token, ordered[i].token)
				}
			}
		}
		// A grant of a larger token while an earlier lease was certainly live.
		for _, newer := range ordered {
			for tok, older := range liveUntil {
				if tok >= newer.token || !newer.endCoord.Before(older.until) {
					continue
				}
				if r, ok := released[tok]; ok && r.Before(newer.end) {
					continue // the older lease may have been released first
				}
				return fmt.Errorf("key %q: token %d was granted while token %d was live (until %v, %s)",
					key, newer.token, tok, older.until, older.what)
			}
		}
		// No lease seen live after a later lease was seen live. For each
		// token, the latest start of an operation that saw it live.
		latestStart := make(map[uint64]event)
		for _, e := range evs {
			if e.what == "release" {
				continue
			}
			if cur, ok := latestStart[e.token]; !ok || e.start.After(cur.start) {
				latestStart[e.token] = e
			}
		}
		for _, newer := range evs {
			if newer.what == "release" {
				continue
			}
			for tok, older := range latestStart {
				if tok < newer.token && newer.end.Before(older.start) {
					return fmt.Errorf("key %q: token %d was seen live (%s) after token %d had been (%s): two live leases at once",
						key, tok, older.what, newer.token, newer.what)
				}
			}
		}
	}
	return nil
}
