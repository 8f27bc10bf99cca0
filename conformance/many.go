package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Cases for backend.MultiGranter: several keys in one atomic grant.

// manyBackend returns a fresh backend for the cases of several keys (see
// ManyHarness), closed when t ends.
func (s suite) manyBackend(t *testing.T) backend.Backend {
	t.Helper()
	mh, ok := s.h.(ManyHarness)
	if !ok {
		return s.backend(t)
	}
	b, err := mh.NewManyBackend(context.Background(), t)
	if err != nil {
		t.Fatalf("NewManyBackend: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// manyReqs returns one request per key, with lease IDs id+"-"+key.
func manyReqs(id string, ttl, margin time.Duration, keys ...string) []backend.Request {
	reqs := make([]backend.Request, len(keys))
	for i, k := range keys {
		reqs[i] = backend.Request{Key: k, LeaseID: id + "-" + k, Timeout: ttl, Margin: margin}
	}
	return reqs
}

// wantLeases fails unless leases answer reqs one for one, each with its key,
// its ID and a non-zero token, and each checks live.
func wantLeases(t *testing.T, c *fencing.Coordinator, reqs []backend.Request, leases []backend.Lease) {
	t.Helper()
	if len(leases) != len(reqs) {
		t.Fatalf("GrantMany returned %d leases for %d requests", len(leases), len(reqs))
	}
	for i, l := range leases {
		if l.Key != reqs[i].Key || l.LeaseID != reqs[i].LeaseID || l.Token == 0 {
			t.Fatalf("lease %d = %+v, want key %q, ID %q and a token", i, l, reqs[i].Key, reqs[i].LeaseID)
		}
		wantLive(t, c, l.Key, l.Token)
	}
}

// testManyGrant: every key gets its lease with its own token sequence, and
// each lease is an ordinary lease afterwards (renewed, released one by one).
func (s suite) testManyGrant(t *testing.T) {
	b := s.manyBackend(t)
	mg := capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	c := fencing.New(b)
	ctx := context.Background()
	before := s.grant(t, c, "m/b", long, time.Second)
	if err := c.Release(ctx, "m/b", before.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	reqs := manyReqs("g1", long, time.Second, "m/c", "m/a", "m/b") // not in key order
	leases, err := mg.GrantMany(ctx, reqs)
	if err != nil {
		t.Fatalf("GrantMany: %v", err)
	}
	wantLeases(t, c, reqs, leases)
	s.wantNext(t, "key m/b's grant in GrantMany", before.Token, leases[2].Token)
	if s.traits.DenseTokens && (leases[0].Token != 1 || leases[1].Token != 1) {
		t.Fatalf("tokens %d, %d on fresh keys; want 1 (dense, per-key sequences)", leases[0].Token, leases[1].Token)
	}
	for _, l := range leases {
		if l.TTL < long || l.ExpiresAt.IsZero() {
			t.Fatalf("lease %+v: want TTL >= %v and an expiry", l, long)
		}
	}
	r := reqs[1]
	if renewed, err := b.Renew(ctx, r); err != nil || renewed.Token != leases[1].Token {
		t.Fatalf("Renew of a GrantMany lease: %+v, %v; want its token %d", renewed, err, leases[1].Token)
	}
	if err := b.Release(ctx, r.Key, r.LeaseID); err != nil {
		t.Fatalf("Release of one GrantMany lease: %v", err)
	}
	wantFree(t, c, r.Key)
	wantLive(t, c, "m/c", leases[0].Token) // the others go on
	wantLive(t, c, "m/b", leases[2].Token)
}

// testManyAllOrNone: one refusing key refuses the whole grant, names that
// request, and changes nothing on the others (no token used up).
func (s suite) testManyAllOrNone(t *testing.T) {
	b := s.manyBackend(t)
	mg := capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	c := fencing.New(b)
	ctx := context.Background()
	held := s.grant(t, c, "n/b", long, time.Second)
	reqs := manyReqs("g2", long, time.Second, "n/a", "n/c", "n/b")
	_, err := mg.GrantMany(ctx, reqs)
	var me *backend.ManyError
	var he *backend.HeldError
	if !errors.As(err, &me) || me.Index != 2 || !errors.As(err, &he) {
		t.Fatalf("GrantMany with n/b held: %v (%T); want a *backend.ManyError with index 2 wrapping a *backend.HeldError", err, err)
	}
	wantFree(t, c, "n/a")
	wantFree(t, c, "n/c")
	wantLive(t, c, "n/b", held.Token)
	// The first refusal in key order is reported.
	other := s.grant(t, c, "n/a", long, time.Second)
	if _, err := mg.GrantMany(ctx, reqs); !errors.As(err, &me) || me.Index != 0 {
		t.Fatalf("GrantMany with n/a and n/b held: %v, want index 0 (n/a, first in key order)", err)
	}
	for _, l := range []fencing.Lease{held, other} {
		if err := c.Release(ctx, l.Key, l.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	leases, err := mg.GrantMany(ctx, reqs)
	if err != nil {
		t.Fatalf("GrantMany once free: %v", err)
	}
	wantLeases(t, c, reqs, leases)
	s.wantNext(t, "n/a after refused GrantManys", other.Token, leases[0].Token)
	s.wantNext(t, "n/b after refused GrantManys", held.Token, leases[2].Token)
	if s.traits.DenseTokens && leases[1].Token != 1 {
		t.Fatalf("n/c's token %d, want 1: a refused GrantMany uses no token", leases[1].Token)
	}
}

// testManyRetry: a resent GrantMany returns the same leases and mints
// nothing; once one of its leases has ended, the resend gets that key's
// verdict and changes nothing.
func (s suite) testManyRetry(t *testing.T) {
	b := s.manyBackend(t)
	mg := capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	c := fencing.New(b)
	ctx := context.Background()
	reqs := manyReqs("g3", long, time.Second, "r/a", "r/b", "r/c")
	first, err := mg.GrantMany(ctx, reqs)
	if err != nil {
		t.Fatalf("GrantMany: %v", err)
	}
	again, err := mg.GrantMany(ctx, reqs)
	if err != nil {
		t.Fatalf("resent GrantMany: %v", err)
	}
	for i := range first {
		if again[i].Token != first[i].Token || again[i].LeaseID != first[i].LeaseID {
			t.Fatalf("resent GrantMany: lease %d %+v, want %+v (no new token)", i, again[i], first[i])
		}
	}
	if err := b.Release(ctx, "r/b", reqs[1].LeaseID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	_, err = mg.GrantMany(ctx, reqs)
	if i, ok := backend.ManyIndex(err); !ok || i != 1 || !errors.Is(err, backend.ErrLeaseNotFound) {
		t.Fatalf("GrantMany resent after r/b's release: %v, want ErrLeaseNotFound about request 1", err)
	}
	wantFree(t, c, "r/b")
	wantLive(t, c, "r/a", first[0].Token)
	wantLive(t, c, "r/c", first[2].Token)
}

// testManyExpiry: leases from one GrantMany expire as ordinary leases, and
// a resend after that gets ErrLeaseExpired.
func (s suite) testManyExpiry(t *testing.T) {
	b := s.manyBackend(t)
	mg := capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	c := fencing.New(b)
	ctx := context.Background()
	timeout, margin := s.short()
	reqs := manyReqs("g4", timeout, margin, "x/a", "x/b")
	leases, err := mg.GrantMany(ctx, reqs)
	returned := time.Now()
	if err != nil {
		t.Fatalf("GrantMany: %v", err)
	}
	last := fencing.Lease{TTL: max(leases[0].TTL, leases[1].TTL), Margin: margin}
	s.waitExpired(t, last, returned)
	wantFree(t, c, "x/a")
	wantFree(t, c, "x/b")
	if _, err := mg.GrantMany(ctx, reqs); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("GrantMany resent after expiry: %v, want ErrLeaseExpired", err)
	}
	next, err := mg.GrantMany(ctx, manyReqs("g5", long, time.Second, "x/b", "x/a"))
	if err != nil {
		t.Fatalf("GrantMany after expiry: %v", err)
	}
	s.wantNext(t, "x/b after expiry", leases[1].Token, next[0].Token)
	s.wantNext(t, "x/a after expiry", leases[0].Token, next[1].Token)
}

// testManyBadInput: no keys, too many, a key twice, a bad request: an
// error wrapping the sentinel, and nothing changes.
func (s suite) testManyBadInput(t *testing.T) {
	b := s.manyBackend(t)
	mg := capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	c := fencing.New(b)
	ctx := context.Background()
	tooMany := make([]string, backend.MaxKeys+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("bad/%d", i)
	}
	badTTL := manyReqs("g6", long, time.Second, "bad/a", "bad/b")
	badTTL[1].Timeout = 0
	for _, tc := range []struct {
		name string
		reqs []backend.Request
		want error
	}{
		{"none", nil, backend.ErrInvalidKey},
		{"too many", manyReqs("g6", long, time.Second, tooMany...), backend.ErrInvalidKey},
		{"a key twice", manyReqs("g6", long, time.Second, "bad/a", "bad/b", "bad/a"), backend.ErrInvalidKey},
		{"an empty key", manyReqs("g6", long, time.Second, "bad/a", ""), backend.ErrInvalidKey},
		{"a zero TTL", badTTL, backend.ErrInvalidTimeout},
	} {
		if _, err := mg.GrantMany(ctx, tc.reqs); !errors.Is(err, tc.want) {
			t.Fatalf("GrantMany with %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	wantFree(t, c, "bad/a")
	wantFree(t, c, "bad/b")
	wantFree(t, c, "bad/0")
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := mg.GrantMany(done, manyReqs("g7", long, time.Second, "bad/a", "bad/b")); err == nil {
		t.Fatal("GrantMany with a done context succeeded")
	}
	wantFree(t, c, "bad/a")
}

// testManyRacing: grants over overlapping sets in random orders, racing:
// the winners' sets never share a key, and every key ends with at most one
// live lease, the latest winner's, with tokens increasing.
func (s suite) testManyRacing(t *testing.T) {
	b := s.manyBackend(t)
	mg := capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	c := fencing.New(b)
	ctx := context.Background()
	keys := []string{"race/a", "race/b", "race/c", "race/d", "race/e"}
	const workers, rounds = 6, 20
	var (
		mu     sync.Mutex
		tokens = map[string]uint64{}
		wg     sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for r := range rounds {
				set := rng.Perm(len(keys))[:2+rng.IntN(2)]
				ks := make([]string, len(set))
				for i, k := range set {
					ks[i] = keys[k]
				}
				reqs := manyReqs(fmt.Sprintf("w%d-%d", w, r), long, time.Second, ks...)
				leases, err := mg.GrantMany(ctx, reqs)
				if errors.Is(err, backend.ErrLeaseHeld) {
					continue
				}
				if err != nil {
					t.Errorf("worker %d: GrantMany(%v): %v", w, ks, err)
					return
				}
				mu.Lock()
				for _, l := range leases {
					if l.Token <= tokens[l.Key] {
						t.Errorf("key %q: token %d after %d", l.Key, l.Token, tokens[l.Key])
					}
					tokens[l.Key] = l.Token
				}
				mu.Unlock()
				for _, l := range leases { // while held, no one else has the key
					if tok, live, err := c.Token(ctx, l.Key); err != nil || !live || tok != l.Token {
						t.Errorf("key %q held with token %d: Token = %d, live %v, %v", l.Key, l.Token, tok, live, err)
					}
				}
				for _, l := range leases {
					if err := b.Release(ctx, l.Key, l.LeaseID); err != nil {
						t.Errorf("Release(%q): %v", l.Key, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(tokens) == 0 {
		t.Fatal("no GrantMany succeeded")
	}
	for _, k := range keys {
		wantFree(t, c, k)
	}
}

// testHoldMany: HoldMany keeps every lease renewed past its TTL, the loss
// of one ends the HeldMany's Context and frees the others, and Release
// frees them all.
func (s suite) testHoldMany(t *testing.T) {
	b := s.manyBackend(t)
	capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	ctx := context.Background()
	s.keepsRenewedOn(t, s.manyBackend, "hm", func(c *fencing.Coordinator, key string, ttl, margin time.Duration) error {
		keys := []string{key + "/b", key + "/a", key + "/c"}
		m, err := c.HoldMany(ctx, keys, ttl, fencing.WithMargin(margin))
		if err != nil {
			t.Fatalf("HoldMany: %v", err)
		}
		first := m.Leases()
		for range 6 {
			s.pass(t, ttl/2)
		}
		if err := m.Err(); err != nil {
			m.Release(ctx)
			return err
		}
		for i, l := range m.Leases() {
			if l.Key != keys[i] || l.Token != first[i].Token || !l.Deadline.After(first[i].Deadline) {
				t.Fatalf("lease %d after renewals = %+v; want key %q, token %d and a later Deadline than %v", i, l, keys[i], first[i].Token, first[i].Deadline)
			}
			// The loss of any one frees all: the earliest Deadline is theirs.
			if err := wantLiveHeld(t, c, l.Key, l.Token, func() time.Time { return earliestDeadline(m.Leases()) }); err != nil {
				m.Release(ctx)
				return err
			}
		}
		if err := m.Release(ctx); errors.Is(err, fencing.ErrLeaseLost) {
			return fmt.Errorf("Release: %w", err) // lost after the checks above, as Do's can be
		} else if err != nil {
			t.Fatalf("Release: %v", err)
		}
		for _, k := range keys {
			wantFree(t, c, k)
		}
		if m.Context().Err() == nil || m.Err() != nil {
			t.Fatalf("after Release: Context().Err() = %v, Err() = %v; want done and nil", m.Context().Err(), m.Err())
		}
		return nil
	})

	// Lost together.
	c := fencing.New(b)
	ttl, margin := s.holdTTL(t)
	keys := []string{"hm/b", "hm/a", "hm/c"}
	m, err := c.HoldMany(ctx, keys, ttl, fencing.WithMargin(margin))
	if err != nil {
		t.Fatalf("HoldMany again: %v", err)
	}
	defer m.Release(ctx)
	switch f, ok := b.(backend.ForceReleaser); {
	case ok:
		if _, err := f.ForceRelease(ctx, "hm/a"); err != nil {
			t.Fatalf("ForceRelease: %v", err)
		}
	case s.traits.Now != nil:
		s.wait(t, ttl+margin) // the coordinator expires them; the next renewal is late
	default:
		t.Skip("cannot end a renewing holder's lease on this backend: no ForceReleaser and no fake clock")
	}
	select {
	case <-m.Done():
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("the HeldMany's Context did not end after one of its leases was lost")
	}
	if err := m.Err(); !errors.Is(err, fencing.ErrLeaseLost) {
		t.Fatalf("Err after a loss: %v, want ErrLeaseLost", err)
	}
	if err := m.Release(ctx); !errors.Is(err, fencing.ErrLeaseLost) {
		t.Fatalf("Release after a loss: %v, want ErrLeaseLost", err)
	}
	for _, k := range keys {
		wantFree(t, c, k)
	}
}

// testLockManyWaits: LockMany waits while one of its keys is held, takes
// none of them meanwhile, and gets them all once that key is released. The
// leases it takes are renewed with a TTL from holdTTL: on a host too slow to
// renew them, keepsRenewedOn runs the case again with a longer TTL.
func (s suite) testLockManyWaits(t *testing.T) {
	b := s.manyBackend(t)
	capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	ctx := context.Background()
	s.keepsRenewedOn(t, s.manyBackend, "lm", func(c *fencing.Coordinator, key string, ttl, margin time.Duration) error {
		ka, kb, kc := key+"/a", key+"/b", key+"/c"
		holder := s.grant(t, c, kb, long, time.Second)
		type result struct {
			m   *fencing.HeldMany
			err error
		}
		got := make(chan result, 1)
		go func() {
			m, err := c.LockMany(ctx, []string{kc, kb, ka}, ttl, fencing.WithMargin(margin))
			got <- result{m, err}
		}()
		// While kb is held, the waiter takes neither of the others: a grant
		// of each succeeds (and is released at once).
		for _, k := range []string{ka, kc} {
			l := s.grant(t, c, k, long, time.Second)
			if err := c.Release(ctx, k, l.ID); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
		select {
		case r := <-got:
			t.Fatalf("LockMany returned while %s was held: %v", kb, r.err)
		default:
		}
		if err := c.Release(ctx, kb, holder.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("LockMany: %v", r.err)
		}
		defer r.m.Release(ctx)
		for _, l := range r.m.Leases() {
			// The loss of any one frees all: the earliest Deadline is theirs.
			if err := wantLiveHeld(t, c, l.Key, l.Token, func() time.Time { return earliestDeadline(r.m.Leases()) }); err != nil {
				return err
			}
		}
		s.wantNext(t, kb+" after its holder", holder.Token, r.m.Leases()[1].Token)
		return nil
	})
}

// testLockManyOverlapping: waiters that lock overlapping sets of keys in
// random orders all get their turn (no deadlock), none holds a key another
// holds, and each key's tokens increase; with and without WithFIFO.
func (s suite) testLockManyOverlapping(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(fmt.Sprintf("FIFO=%v", fifo), func(t *testing.T) {
			b := s.manyBackend(t)
			capability[backend.MultiGranter](t, b, "backend.MultiGranter")
			if _, ok := b.(backend.Queuer); fifo && !ok {
				t.Skip("optional capability: the backend does not implement backend.Queuer")
			}
			c := fencing.New(b)
			ctx := context.Background()
			ttl, margin := s.holdTTL(t)
			// What the store missed (a Dequeue or a release given up on a
			// loaded host) ends at its TTL, as on a real store, only if the
			// coordinator's clock moves.
			defer s.followRealTime(t)()
			keys := []string{"ov/a", "ov/b", "ov/c", "ov/d"}
			const workers, rounds = 4, 3
			type hold struct {
				w int
				m *fencing.HeldMany
			}
			// deadline is h's Deadline on key now (renewals move it).
			deadline := func(h hold, key string) time.Time {
				for _, l := range h.m.Leases() {
					if l.Key == key {
						return l.Deadline
					}
				}
				return time.Time{}
			}
			var (
				mu     sync.Mutex
				holder = map[string]hold{}
				tokens = map[string]uint64{}
				wg     sync.WaitGroup
			)
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 2))
					for range rounds {
						set := rng.Perm(len(keys))[:2+rng.IntN(2)]
						ks := make([]string, len(set))
						for i, k := range set {
							ks[i] = keys[k]
						}
						opts := []fencing.LockOption{fencing.WithMargin(margin)}
						if fifo {
							opts = append(opts, fencing.WithFIFO())
						}
						m, err := c.LockMany(ctx, ks, ttl, opts...)
						if err != nil {
							t.Errorf("worker %d: LockMany(%v): %v", w, ks, err)
							return
						}
						mu.Lock()
						for _, l := range m.Leases() {
							// Another worker still counts the key as its own: a
							// violation before that worker's Deadline (the store's end
							// is no earlier); after it, that worker's lease ended on a
							// host too slow to renew it, and this grant is right.
							if h, ok := holder[l.Key]; ok {
								if end := deadline(h, l.Key); time.Now().Before(end) {
									t.Errorf("key %q held by workers %d and %d at once (%v before %d's Deadline)", l.Key, h.w, w, time.Until(end), h.w)
								} else {
									t.Logf("key %q: worker %d's lease ended at its Deadline (a slow host) before worker %d got the key", l.Key, h.w, w)
								}
							}
							if l.Token <= tokens[l.Key] {
								t.Errorf("key %q: token %d after %d", l.Key, l.Token, tokens[l.Key])
							}
							holder[l.Key], tokens[l.Key] = hold{w, m}, l.Token
						}
						mu.Unlock()
						for _, l := range m.Leases() { // while held, no one else has the key
							tok, live, err := c.Token(ctx, l.Key)
							if err == nil && live && tok == l.Token {
								continue
							}
							if m.Err() != nil || time.Now().After(deadline(hold{w, m}, l.Key)) {
								break // lost on a slow host: see Release below
							}
							t.Errorf("key %q held with token %d: Token = %d, live %v, %v", l.Key, l.Token, tok, live, err)
						}
						mu.Lock()
						for _, l := range m.Leases() {
							if holder[l.Key].m == m {
								delete(holder, l.Key)
							}
						}
						mu.Unlock()
						if err := m.Release(ctx); errors.Is(err, fencing.ErrLeaseLost) {
							// Keeping leases is HoldMany's case; here a loss is a host
							// too slow for the TTL (derived from one round trip), and
							// what this case checks still holds.
							t.Logf("worker %d: the leases ended before Release (a slow host): %v", w, err)
						} else if err != nil {
							t.Errorf("worker %d: Release: %v", w, err)
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// followRealTime, on a harness with a fake clock, advances the
// coordinator's clock as real time passes (never more than one step of
// 10ms ahead of it over any interval: a lease's margin covers that), until the
// returned func is called, which waits for the goroutine. A case that
// runs on real time (waiters that wait for each other under load) needs
// it: an entry in a line whose Dequeue was given up (its bound passed
// while it waited behind the other waiters' calls) is then removed by its
// expiry, as on a real store; on a frozen clock it stays at the head of
// its line for ever, and every waiter behind it polls on in waitTurn.
func (s suite) followRealTime(t *testing.T) (stop func()) {
	t.Helper()
	if s.traits.Now == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		const step = 10 * time.Millisecond
		tick := time.NewTicker(step)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// At most one tick at a time: time the goroutine did not run
			// (a loaded host) is dropped, not caught up in one step, which
			// would end a lease granted during it early by as much.
			now := time.Now()
			d := min(now.Sub(last), step)
			last = now
			if err := s.h.Wait(ctx, d); err != nil {
				if ctx.Err() == nil {
					t.Errorf("Wait(%v): %v", d, err)
				}
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// earliestDeadline is the earliest Deadline of leases.
func earliestDeadline(leases []fencing.Lease) time.Time {
	dl := leases[0].Deadline
	for _, l := range leases[1:] {
		if l.Deadline.Before(dl) {
			dl = l.Deadline
		}
	}
	return dl
}
