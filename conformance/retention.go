package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Retainer is implemented by a harness whose backends reclaim idle keys
// (see "Retention" in package backend's doc). The retention cases run only
// where it is; elsewhere they skip as a harness capability.
type Retainer interface {
	// NewBackendWithRetention is NewBackend for a backend whose retention
	// is d (its package's WithRetention(d)). The harness's Wait and Traits
	// hold for it as for NewBackend's. The suite closes it.
	NewBackendWithRetention(ctx context.Context, t testing.TB, d time.Duration) (backend.Backend, error)
	// Records returns how many key records the store holds for b's keys
	// (backend.StoreSize.Records, where b is a backend.Sizer), not
	// counting fixed ones (a floor).
	Records(ctx context.Context, b backend.Backend) (int, error)
}

// retention is the retention the cases give their backends: the shortest
// a backend must accept.
const retention = time.Second

// retainer returns the harness's Retainer and a fresh backend of it with
// the cases' retention, closed when t ends; it skips t when the harness
// has none.
func (s suite) retainer(t *testing.T) (Retainer, backend.Backend) {
	t.Helper()
	r, ok := s.h.(Retainer)
	if !ok {
		t.Skip("harness capability: the harness does not implement conformance.Retainer")
	}
	b, err := r.NewBackendWithRetention(context.Background(), t, retention)
	if err != nil {
		t.Fatalf("NewBackendWithRetention(%v): %v", retention, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r, b
}

// testRetentionChurn grants and releases many distinct keys, waits past the
// retention and drives the backend with calls on one other key: the store
// must come back to its live keys and that one, without a call on the
// reclaimed keys; then each reclaimed key reads as never leased, its old
// lease IDs are not found, and its next token is above its old ones.
func (s suite) testRetentionChurn(t *testing.T) {
	r, b := s.retainer(t)
	ctx := context.Background()
	n := 2000
	if s.traits.Now == nil {
		n = 200 // a real server: a round trip each
	}
	grant := func(key, id string, ttl time.Duration) backend.Lease {
		t.Helper()
		l, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: ttl})
		if err != nil {
			t.Fatalf("Grant(%q): %v", key, err)
		}
		return l
	}
	release := func(l backend.Lease) {
		t.Helper()
		if err := b.Release(ctx, l.Key, l.LeaseID); err != nil {
			t.Fatalf("Release(%q): %v", l.Key, err)
		}
	}
	records := func() int {
		t.Helper()
		n, err := r.Records(ctx, b)
		if err != nil {
			t.Fatalf("Records: %v", err)
		}
		return n
	}
	kept := grant("retain/kept", "kept-lease", time.Hour) // live throughout
	began := time.Now()                                   // before any key below can idle
	var reused backend.Lease
	for i := range 3 {
		reused = grant("retain/reused", fmt.Sprintf("reused-%d", i), long)
		release(reused)
	}
	old := make([]backend.Lease, n)
	for i := range old {
		old[i] = grant(fmt.Sprintf("retain/churn/%05d", i), fmt.Sprintf("churn-%d", i), long)
		release(old[i])
	}
	got := records()
	resent := b.Release(ctx, old[0].Key, old[0].LeaseID)
	// On a real clock a slow machine may take longer than the retention to
	// get here, and the backend may have reclaimed the first keys already:
	// the two checks hold only within the retention.
	if within := s.traits.Now != nil || time.Since(began) < retention; !within {
		t.Logf("the churn took %v, longer than the retention: the count of records and the resent release are not checked", time.Since(began).Round(time.Millisecond))
	} else {
		if got < n+2 {
			t.Fatalf("the store holds %d records after %d keys were leased; want at least %d: Records counts too few", got, n+2, n+2)
		}
		if resent != nil {
			t.Fatalf("a release resent within the retention: %v, want nil", resent)
		}
	}

	// Past the retention, calls on another key drive the reclaiming.
	s.wait(t, retention)
	const want = 2 // the live key and the key driving
	start, got := time.Now(), 0
	for i := 0; ; i++ {
		release(grant("retain/driver", fmt.Sprintf("driver-%d", i), long))
		if got = records(); got <= want {
			t.Logf("%d records after %d grants on another key and %v", got, i+1, time.Since(start).Round(time.Millisecond))
			break
		}
		if (s.traits.Now != nil && i >= 100_000) || (s.traits.Now == nil && time.Since(start) > 10*retention+30*time.Second) {
			t.Fatalf("%v past the retention, after %d grants on another key, the store holds %d records; want at most %d (the live key and the key driving)",
				time.Since(start).Round(time.Millisecond), i+1, got, want)
		}
		s.wait(t, retention/8)
	}

	if tok, live, err := b.Token(ctx, kept.Key); err != nil || !live || tok != kept.Token {
		t.Errorf("Token of the key leased throughout = %d, %v, %v; want %d, live: a live key was reclaimed", tok, live, err, kept.Token)
	}
	if l, ok := b.(backend.Lister); ok {
		page, _, err := l.List(ctx, "retain/churn/", "", 10)
		if err != nil || len(page) != 0 {
			t.Errorf("List of the reclaimed keys = %d keys, %v; want none", len(page), err)
		}
	}
	if insp, ok := b.(backend.Inspector); ok {
		for _, o := range old {
			if st, err := insp.Inspect(ctx, o.Key); err != nil || st != (backend.KeyState{}) {
				t.Fatalf("Inspect(%q) of a reclaimed key = %+v, %v; want the zero KeyState", o.Key, st, err)
			}
		}
	}
	for _, o := range old[:min(len(old), 50)] {
		if tok, live, err := b.Token(ctx, o.Key); err != nil || live || tok != 0 {
			t.Errorf("Token(%q) of a reclaimed key = %d, %v, %v; want none", o.Key, tok, live, err)
		}
		if _, err := b.Renew(ctx, backend.Request{Key: o.Key, LeaseID: o.LeaseID, Timeout: long}); !errors.Is(err, backend.ErrLeaseNotFound) {
			t.Errorf("Renew(%q) with the lease ID of before the reclaim: %v, want ErrLeaseNotFound", o.Key, err)
		}
		if err := b.Release(ctx, o.Key, o.LeaseID); !errors.Is(err, backend.ErrLeaseNotFound) {
			t.Errorf("Release(%q) with the lease ID of before the reclaim: %v, want ErrLeaseNotFound", o.Key, err)
		}
		// A resent grant may get a new lease: never an old token.
		l, err := b.Grant(ctx, backend.Request{Key: o.Key, LeaseID: o.LeaseID, Timeout: long})
		switch {
		case err == nil && l.Token <= o.Token:
			t.Errorf("Grant(%q) after the reclaim: token %d, not above %d, the key's token before: a token reissued", o.Key, l.Token, o.Token)
		case err != nil && !errors.Is(err, backend.ErrLeaseNotFound):
			t.Errorf("Grant(%q) resent after the reclaim: %v, want a new lease or ErrLeaseNotFound", o.Key, err)
		}
	}
	if l := grant(reused.Key, "reused-after", long); l.Token <= reused.Token {
		t.Errorf("Grant(%q) after the reclaim: token %d, not above %d, the key's last before: a token reissued", reused.Key, l.Token, reused.Token)
	}
}

// testRetentionRace runs goroutines on a few keys with idle gaps longer
// than the retention, so keys are reclaimed between and during their
// calls, and checks the history with the lease model extended by
// reclamation: one live lease per key, and each token above every earlier
// one on its key, whatever was reclaimed.
func (s suite) testRetentionRace(t *testing.T) {
	_, b := s.retainer(t)
	keys := []string{"race/0", "race/1", "race/2"}
	rec := NewRecorder(s.traits.Now)
	const workers = 6
	ops, deadline := 150, time.Now().Add(time.Minute)
	ttl := retention / 4
	if s.traits.Now == nil {
		ops = 1 << 30 // bounded by the deadline: the gaps take real time
		deadline = time.Now().Add(7*retention + 2*time.Second)
		ttl = max(ttl, s.traits.MinTTL)
	}
	// On a real clock the workers' own idle gaps seldom line up on a key
	// (the others keep it busy): in every round of 3*retention they all stop
	// calling after the first retention (a lease granted just before lives
	// its TTL, then its key idles for the retention), and come back one
	// after the other, retention/8 apart, so that the first calls of the
	// next round drive the backend's reclaiming and race it on the keys
	// they call, and the keys nobody called yet are reclaimed.
	start := time.Now()
	quiet := func(w int) {
		const round = 3 * retention
		in := time.Since(start) % round
		if s.traits.Now == nil && in >= retention && time.Now().Add(round-in).Before(deadline) {
			time.Sleep(round - in + time.Duration(w)*retention/8)
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(7, uint64(w)))
		client := rec.Wrap(b)
		wg.Go(func() {
			ctx := context.Background()
			held := make(map[string]string) // key -> the lease ID this worker holds
			var old []backend.Request
			for op := 0; op < ops && time.Now().Before(deadline); op++ {
				quiet(w)
				key := keys[rng.IntN(len(keys))]
				id, holding := held[key]
				req := backend.Request{Key: key, LeaseID: id, Timeout: ttl}
				switch r := rng.IntN(14); {
				case r < 4:
					req.LeaseID = fmt.Sprintf("w%d-%d", w, op)
					if _, err := client.Grant(ctx, req); err == nil {
						held[key] = req.LeaseID
						old = append(old, req)
					}
				case r < 6 && holding:
					client.Release(ctx, key, id)
					delete(held, key)
				case r < 7 && holding:
					if _, err := client.Renew(ctx, req); err != nil {
						delete(held, key)
					}
				case r < 9:
					client.Token(ctx, key)
				case r < 11 && len(old) > 0:
					// A call of an older lease: late, perhaps after its
					// key was reclaimed.
					o := old[rng.IntN(len(old))]
					switch rng.IntN(3) {
					case 0:
						client.Renew(ctx, o)
					case 1:
						client.Release(ctx, o.Key, o.LeaseID)
					default:
						client.Grant(ctx, o)
					}
				case r < 12:
					// An idle gap longer than the retention.
					clear(held)
					if err := s.h.Wait(ctx, retention+retention/4); err != nil {
						t.Errorf("Wait: %v", err)
					}
				default:
					if err := s.h.Wait(ctx, time.Duration(rng.Int64N(int64(ttl)))); err != nil {
						t.Errorf("Wait: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	history := rec.History()
	traits := s.traits
	traits.Retention = retention
	CheckLinearizable(t, history, traits)
	if sz, ok := b.(backend.Sizer); ok {
		st, err := sz.Size(context.Background())
		if err != nil {
			t.Fatalf("Size: %v", err)
		}
		if st.Reclaimed == 0 {
			t.Fatalf("no key was reclaimed in %d calls: the case tested nothing", len(history))
		}
		t.Logf("checked %d calls; %d keys reclaimed", len(history), st.Reclaimed)
	}
}
