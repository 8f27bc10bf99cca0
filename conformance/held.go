package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Cases for fencing.Coordinator's Hold, Lock and Do on the backend: the
// renewer, the waiter and their wake-ups run against the real store.

// holdTTL is the TTL and margin of held leases: short, but long enough for
// the renewer to keep them on this host (see renewedTTL), and honoured as
// asked.
func (s suite) holdTTL(t *testing.T) (ttl, margin time.Duration) {
	t.Helper()
	ttl = s.renewedTTL(t, max(s.traits.MinTTL, 400*time.Millisecond))
	return ttl, ttl / 4
}

// pass lets d pass both in real time (the renewer's clock) and on the
// coordinator's clock (which, faked, moves only when told).
func (s suite) pass(t *testing.T, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	if s.traits.Now != nil {
		s.wait(t, d)
	}
}

func (s suite) hold(t *testing.T, c *fencing.Coordinator, key string, ttl, margin time.Duration, opts ...fencing.HoldOption) *fencing.Held {
	t.Helper()
	h, err := c.Hold(context.Background(), key, ttl, append([]fencing.HoldOption{fencing.WithMargin(margin)}, opts...)...)
	if err != nil {
		t.Fatalf("Hold(%q): %v", key, err)
	}
	t.Cleanup(func() { h.Release(context.Background()) })
	return h
}

// testHoldRenews: a held lease outlives several TTLs, keeping its token.
func (s suite) testHoldRenews(t *testing.T) {
	s.keepsRenewed(t, "hold", func(c *fencing.Coordinator, key string, ttl, margin time.Duration) error {
		h := s.hold(t, c, key, ttl, margin)
		first := h.Lease()
		for range 6 {
			s.pass(t, ttl/2)
		}
		if err := h.Err(); err != nil {
			return fmt.Errorf("Err after 3 TTLs of renewals: %w", err)
		}
		if err := wantLiveHeld(t, c, key, first.Token, func() time.Time { return h.Lease().Deadline }); err != nil {
			h.Release(context.Background())
			return err
		}
		if l := h.Lease(); l.Token != first.Token || !l.Deadline.After(first.Deadline) {
			t.Fatalf("Lease after renewals = token %d, deadline %v; want token %d and a later deadline than %v",
				l.Token, l.Deadline, first.Token, first.Deadline)
		}
		if dl, ok := h.Context().Deadline(); !ok || dl.After(h.Lease().Deadline) {
			t.Fatalf("Context().Deadline() = %v, %v; want at most the lease's Deadline %v", dl, ok, h.Lease().Deadline)
		}
		if err := h.Release(context.Background()); errors.Is(err, fencing.ErrLeaseLost) {
			return fmt.Errorf("Release: %w", err) // lost after the checks above, as Do's can be
		} else if err != nil {
			t.Fatalf("Release: %v", err)
		}
		if err := h.Release(context.Background()); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		wantFree(t, c, key)
		if h.Context().Err() == nil || h.Err() != nil {
			t.Fatalf("after Release: Context().Err() = %v, Err() = %v; want done and nil", h.Context().Err(), h.Err())
		}
		return nil
	})
}

// testHoldLost: a renewal the coordinator rejects ends the context with
// ErrLeaseLost and the verdict.
func (s suite) testHoldLost(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	ttl, margin := s.holdTTL(t)
	var h *fencing.Held
	for run := 1; ; run++ {
		h = s.hold(t, c, "lost", ttl, margin)
		switch f, ok := b.(backend.ForceReleaser); {
		case ok:
			if _, err := f.ForceRelease(context.Background(), "lost"); err != nil {
				t.Fatalf("ForceRelease: %v", err)
			}
		case s.traits.Now != nil:
			s.wait(t, ttl+margin) // the coordinator expires it; the next renewal is late
		default:
			t.Skip("cannot end a renewing holder's lease on this backend: no ForceReleaser and no fake clock")
		}
		select {
		case <-h.Done():
		case <-time.After(ttl + 10*time.Second):
			t.Fatalf("the held lease's context did not end after the coordinator ended the lease")
		}
		err := h.Err()
		if errors.Is(err, fencing.ErrLeaseLost) && !(errors.Is(err, fencing.ErrLeaseNotFound) || errors.Is(err, fencing.ErrLeaseExpired)) &&
			time.Now().After(h.Lease().Deadline) && run < 3 {
			// The Deadline passed before the renewal that would hear
			// the verdict (a slow host: seen on SQLite at load 8 with a
			// 400 ms TTL).
			t.Logf("run %d, TTL %v: the Deadline passed before the verdict (%v): again with a TTL of %v", run, ttl, err, 4*ttl)
			ttl, margin = 4*ttl, 4*margin
			continue
		}
		if !errors.Is(err, fencing.ErrLeaseLost) || !(errors.Is(err, fencing.ErrLeaseNotFound) || errors.Is(err, fencing.ErrLeaseExpired)) {
			t.Fatalf("Err() = %v, want ErrLeaseLost with the coordinator's verdict", err)
		}
		break
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, fencing.ErrLeaseLost) {
		t.Fatalf("context.Cause = %v, want ErrLeaseLost", cause)
	}
	if err := h.Release(context.Background()); !errors.Is(err, fencing.ErrLeaseLost) {
		t.Fatalf("Release after the loss = %v, want the loss", err)
	}
}

// testHoldParentCanceled: ending the parent context ends the lease's and
// frees the key.
func (s suite) testHoldParentCanceled(t *testing.T) {
	c, _ := s.coordinator(t)
	ttl, margin := s.holdTTL(t)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := c.Hold(ctx, "parent", ttl, fencing.WithMargin(margin))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	cancel()
	<-h.Done()
	if err := h.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err() after the parent was canceled = %v, want context.Canceled", err)
	}
	h.Release(context.Background())
	wantFree(t, c, "parent")
}

// testLockWaitsForRelease: Lock returns once the holder releases, not
// before, with a larger token.
func (s suite) testLockWaitsForRelease(t *testing.T) {
	c, _ := s.coordinator(t)
	ttl, margin := s.holdTTL(t)
	holder := s.grant(t, c, "lock", long, time.Second)
	got := make(chan *fencing.Held, 1)
	errc := make(chan error, 1)
	go func() {
		h, err := c.Lock(context.Background(), "lock", ttl, fencing.WithMargin(margin))
		if err != nil {
			errc <- err
			return
		}
		got <- h
	}()
	select {
	case h := <-got:
		h.Release(context.Background())
		t.Fatalf("Lock returned token %d while the key was held", h.Token())
	case err := <-errc:
		t.Fatalf("Lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.Release(context.Background(), "lock", holder.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case h := <-got:
		defer h.Release(context.Background())
		s.wantNext(t, "Lock after release", holder.Token, h.Token())
		wantLive(t, c, "lock", h.Token())
	case err := <-errc:
		t.Fatalf("Lock: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Lock did not return within 10s of the release")
	}
}

// testLockAfterExpiry: a holder that vanishes without releasing hands the
// key over when its lease expires.
func (s suite) testLockAfterExpiry(t *testing.T) {
	c, _ := s.coordinator(t)
	ttl, margin := s.holdTTL(t)
	gone, returned := s.grantShort(t, c, "abandoned")
	done := make(chan error, 1)
	var token atomic.Uint64
	go func() {
		h, err := c.Lock(context.Background(), "abandoned", ttl, fencing.WithMargin(margin), fencing.WithPollInterval(50*time.Millisecond))
		if err == nil {
			token.Store(h.Token())
			err = h.Release(context.Background())
			// The hand-over is what this case checks: a lease lost
			// before its Release, once its Deadline passed, is this
			// host's (seen on SQLite at load 30-60 with 400 ms leases:
			// "deadline passed without a confirmed renewal").
			if errors.Is(err, fencing.ErrLeaseLost) && time.Now().After(h.Lease().Deadline) {
				t.Logf("the new holder's lease ended before its Release (%v): a host slower than the lease", err)
				err = nil
			}
		}
		done <- err
	}()
	s.waitExpired(t, gone, returned)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("Lock did not return within 15s of the holder's expiry")
	}
	s.wantNext(t, "Lock after expiry", gone.Token, token.Load())
}

// testLockManyWaiters: every waiter gets the key in turn, round after
// round, never two at once, with tokens increasing in grant order.
//
// A machine busy enough can stall a holder (or its store) past its
// lease's Deadline: its lease is then lost, and the key another's. Such a
// round is no fault of the backend's, as long as the loss is reported
// (Release's error wraps fencing.ErrLeaseLost) and the Deadline had
// passed by then; two holders at once are a fault only while the one
// inside before still holds its lease (its Err is nil: the Deadline has
// not passed).
func (s suite) testLockManyWaiters(t *testing.T) {
	c, _ := s.coordinator(t)
	ttl, margin := s.holdTTL(t)
	const waiters, rounds = 6, 3
	var (
		mu      sync.Mutex
		inside  *fencing.Held // the holder between its Lock and its Release
		order   []uint64
		lost    []error
		wg      sync.WaitGroup
		errs    = make(chan error, 2*waiters*rounds)
		ctx, cn = context.WithTimeout(context.Background(), 60*time.Second)
	)
	defer cn()
	for range waiters {
		wg.Go(func() {
			for range rounds {
				h, err := c.Lock(ctx, "many", ttl, fencing.WithMargin(margin))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if inside != nil && inside.Err() == nil {
					errs <- fmt.Errorf("token %d granted while token %d's lease is held", h.Token(), inside.Token())
				}
				inside = h
				if n := len(order); n > 0 && h.Token() <= order[n-1] && (h.Token() == order[n-1] || h.Err() == nil) {
					// Token order[n-1] was granted after h's, while h's
					// lease is held (or the same token twice).
					errs <- fmt.Errorf("token %d granted after token %d", order[n-1], h.Token())
				}
				order = append(order, h.Token())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				if inside == h {
					inside = nil
				}
				mu.Unlock()
				err = h.Release(ctx)
				switch deadline := h.Lease().Deadline; {
				case err == nil:
				case errors.Is(err, fencing.ErrLeaseLost) && time.Now().After(deadline):
					mu.Lock()
					lost = append(lost, fmt.Errorf("token %d: %w", h.Token(), err))
					mu.Unlock()
				default:
					errs <- fmt.Errorf("token %d (Deadline in %v): %w", h.Token(), time.Until(deadline), err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("waiter: %v", err)
	}
	for _, err := range lost {
		t.Logf("a holder stalled past its Deadline on this busy machine: %v", err)
	}
	if len(order) != waiters*rounds {
		t.Fatalf("%d of %d locks taken", len(order), waiters*rounds)
	}
	// A holder that lost its lease before it took its place above may
	// come after one granted later; the tokens are still all different.
	slices.Sort(order)
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("tokens %v: token %d granted twice", order, order[i])
		}
	}
}

// testLockCanceled: a waiter whose context ends gives up with its error,
// takes nothing, and leaves the key to its holder.
func (s suite) testLockCanceled(t *testing.T) {
	c, _ := s.coordinator(t)
	ttl, margin := s.holdTTL(t)
	holder := s.grant(t, c, "canceled", long, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	h, err := c.Lock(ctx, "canceled", ttl, fencing.WithMargin(margin))
	if err == nil {
		h.Release(context.Background())
		t.Fatalf("Lock on a held key returned a lease")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an ending context: %v, want context.DeadlineExceeded", err)
	}
	wantLive(t, c, "canceled", holder.Token)
}

// testDoRenews: Do keeps its lease for as long as fn runs.
func (s suite) testDoRenews(t *testing.T) {
	s.keepsRenewed(t, "do", func(c *fencing.Coordinator, key string, ttl, margin time.Duration) error {
		var token uint64
		err := c.Do(context.Background(), key, ttl, func(ctx context.Context, lease fencing.Lease) error {
			token = lease.Token
			for range 6 {
				s.pass(t, ttl/2)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("fn's context ended after 3 TTLs: %w", context.Cause(ctx))
			}
			return wantLiveHeld(t, c, key, lease.Token, func() time.Time { dl, _ := ctx.Deadline(); return dl })
		}, fencing.WithMargin(margin))
		if errors.Is(err, fencing.ErrLeaseLost) {
			return fmt.Errorf("Do: %w", err)
		}
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		if token == 0 {
			t.Fatalf("fn did not run")
		}
		wantFree(t, c, key)
		return nil
	})
}
