package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// testLockAnyWaits: LockAny takes a free key at once, leaving the held ones
// alone; with every key held it waits, takes none meanwhile, and gets the
// key whose holder releases, with that key's next token.
func (s suite) testLockAnyWaits(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	ttl, margin := s.holdTTL(t)
	keys := []string{"any/a", "any/b", "any/c"}
	ha := s.grant(t, c, keys[0], long, time.Second)
	hb := s.grant(t, c, keys[1], long, time.Second)
	h, err := c.LockAny(ctx, keys, ttl, fencing.WithMargin(margin))
	if err != nil {
		t.Fatalf("LockAny with %s free: %v", keys[2], err)
	}
	if got := h.Lease().Key; got != keys[2] {
		h.Release(ctx)
		t.Fatalf("LockAny with only %s free got %s", keys[2], got)
	}
	wantLive(t, c, keys[0], ha.Token)
	wantLive(t, c, keys[1], hb.Token)
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	hc := s.grant(t, c, keys[2], long, time.Second)

	type result struct {
		h   *fencing.Held
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := c.LockAny(ctx, keys, ttl, fencing.WithMargin(margin))
		got <- result{h, err}
	}()
	select {
	case r := <-got:
		if r.h != nil {
			r.h.Release(ctx)
		}
		t.Fatalf("LockAny returned while every key was held: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.Release(ctx, keys[1], hb.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("LockAny: %v", r.err)
		}
		defer r.h.Release(ctx)
		if k := r.h.Lease().Key; k != keys[1] {
			t.Fatalf("LockAny got %s after %s was released", k, keys[1])
		}
		s.wantNext(t, "LockAny after release", hb.Token, r.h.Token())
		if err := wantLiveHeld(t, c, keys[1], r.h.Token(), func() time.Time { return r.h.Lease().Deadline }); err != nil {
			t.Logf("the lease ended before it was read (a slow host): %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("LockAny did not return within 10s of a release")
	}
	wantLive(t, c, keys[0], ha.Token)
	wantLive(t, c, keys[2], hc.Token)

	// A WithWaitTimeout that ends the wait: ErrLeaseHeld, nothing taken.
	// The wait is the TTL (from the store's round trip), long enough for
	// the first attempt's answer: a wait that ends before any answer
	// cannot say the keys are held.
	_, err = c.LockAny(ctx, []string{keys[0], keys[2]}, ttl, fencing.WithMargin(margin), fencing.WithWaitTimeout(ttl))
	if !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("LockAny with every key held past its wait timeout: %v, want ErrLeaseHeld", err)
	}
	wantLive(t, c, keys[0], ha.Token)
	wantLive(t, c, keys[2], hc.Token)
	for _, bad := range [][]string{nil, {"any/x", "any/x"}, {""}} {
		if _, err := c.LockAny(ctx, bad, ttl); !errors.Is(err, fencing.ErrInvalidKey) {
			t.Fatalf("LockAny(%q): %v, want ErrInvalidKey", bad, err)
		}
	}
}

// testLockAnyFIFO: LockAny with WithFIFO waits in every key's line: a
// Lock that joins one of them later waits behind it, and the key goes to
// LockAny; it leaves the other lines as it gets its key, so that a waiter
// there gets that key at its release.
func (s suite) testLockAnyFIFO(t *testing.T) {
	b, _ := s.queuer(t)
	c := fencing.New(b)
	ctx := context.Background()
	ttl, margin := s.holdTTL(t)
	defer s.followRealTime(t)()
	ka, kb := "anyfifo/a", "anyfifo/b"
	ha := s.grant(t, c, ka, long, time.Second)
	hb := s.grant(t, c, kb, long, time.Second)
	type result struct {
		h   *fencing.Held
		err error
	}
	first := make(chan result, 1)
	go func() {
		h, err := c.LockAny(ctx, []string{kb, ka}, ttl, fencing.WithMargin(margin), fencing.WithFIFO())
		first <- result{h, err}
	}()
	s.awaitLines(t, b, 1, ka, kb)
	second := make(chan result, 1)
	go func() {
		h, err := c.Lock(ctx, ka, ttl, fencing.WithMargin(margin), fencing.WithFIFO())
		second <- result{h, err}
	}()
	s.awaitLines(t, b, 2, ka)
	if err := c.Release(ctx, ka, ha.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	var any *fencing.Held
	select {
	case r := <-first:
		if r.err != nil {
			t.Fatalf("LockAny: %v", r.err)
		}
		any = r.h
		if k := any.Lease().Key; k != ka {
			t.Fatalf("LockAny got %s, want %s (the key released)", k, ka)
		}
	case r := <-second:
		if r.h != nil {
			r.h.Release(ctx)
		}
		t.Fatalf("the Lock that joined %s's line after LockAny got the key first (%v)", ka, r.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("LockAny did not return within 10s of the release of %s", ka)
	}
	// LockAny left kb's line: a waiter there gets kb at its release.
	third := make(chan result, 1)
	go func() {
		h, err := c.Lock(ctx, kb, ttl, fencing.WithMargin(margin), fencing.WithFIFO())
		third <- result{h, err}
	}()
	s.awaitLines(t, b, 1, kb)
	if err := c.Release(ctx, kb, hb.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, w := range []struct {
		name string
		ch   chan result
		rel  func()
	}{{"Lock of " + kb, third, func() {}}, {"Lock of " + ka, second, func() { any.Release(ctx) }}} {
		w.rel()
		select {
		case r := <-w.ch:
			if r.err != nil {
				t.Fatalf("%s: %v", w.name, r.err)
			}
			r.h.Release(ctx)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return within 10s of the key's release", w.name)
		}
	}
}

// awaitLines waits until each of keys has n waiters in its line, on a
// backend.LineReader; without one, it waits a while for the waiters to
// join.
func (s suite) awaitLines(t *testing.T, b backend.Backend, n int, keys ...string) {
	t.Helper()
	lr, ok := b.(backend.LineReader)
	if !ok {
		time.Sleep(time.Second)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range keys {
		for lineLength(t, lr, k) < n {
			if time.Now().After(deadline) {
				t.Fatalf("line of %s: fewer than %d waiters after 10s", k, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// testLockAnyOverlapping: waiters that each take any one of a few keys,
// over and over, never hold one key together, and each key's tokens
// increase; with and without WithFIFO.
func (s suite) testLockAnyOverlapping(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(fmt.Sprintf("FIFO=%v", fifo), func(t *testing.T) {
			b := s.backend(t)
			if _, ok := b.(backend.Queuer); fifo && !ok {
				t.Skip("optional capability: the backend does not implement backend.Queuer")
			}
			c := fencing.New(b)
			ctx := context.Background()
			ttl, margin := s.holdTTL(t)
			defer s.followRealTime(t)()
			keys := []string{"anyov/a", "anyov/b", "anyov/c"}
			const workers, rounds = 6, 3
			var (
				mu     sync.Mutex
				holder = map[string]*fencing.Held{}
				tokens = map[string]uint64{}
				wg     sync.WaitGroup
			)
			for w := range workers {
				wg.Go(func() {
					for range rounds {
						opts := []fencing.LockOption{fencing.WithMargin(margin)}
						if fifo {
							opts = append(opts, fencing.WithFIFO())
						}
						h, err := c.LockAny(ctx, keys, ttl, opts...)
						if err != nil {
							t.Errorf("worker %d: LockAny: %v", w, err)
							return
						}
						l := h.Lease()
						mu.Lock()
						if !slices.Contains(keys, l.Key) {
							t.Errorf("worker %d: LockAny got key %q", w, l.Key)
						}
						// Another worker still counts the key as its own: a
						// violation while its lease is held (its Err nil: its
						// Deadline has not passed); after, a host too slow to
						// renew, and this grant is right.
						if prev, ok := holder[l.Key]; ok && prev.Err() == nil {
							t.Errorf("key %q held by two workers at once (tokens %d and %d)", l.Key, prev.Token(), l.Token)
						}
						if l.Token <= tokens[l.Key] {
							t.Errorf("key %q: token %d after %d", l.Key, l.Token, tokens[l.Key])
						}
						holder[l.Key], tokens[l.Key] = h, l.Token
						mu.Unlock()
						time.Sleep(time.Millisecond)
						mu.Lock()
						if holder[l.Key] == h {
							delete(holder, l.Key)
						}
						mu.Unlock()
						if err := h.Release(ctx); errors.Is(err, fencing.ErrLeaseLost) {
							t.Logf("worker %d: the lease ended before Release (a slow host): %v", w, err)
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
