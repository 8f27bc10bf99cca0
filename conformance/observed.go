package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Observer is implemented by the Harness of a backend.ObservedExpiry
// backend, so that the suite can check the rule that backend keeps in
// place of the coordinator's clock.
type Observer interface {
	// NewObserver returns another backend over the same key space as b
	// that has observed nothing yet: a process that has just started.
	NewObserver(ctx context.Context, t testing.TB, b backend.Backend) (backend.Backend, error)
}

// testObservedExpiry: on a backend.ObservedExpiry backend, a lease its
// holder stopped renewing ends for the backend that saw it granted, while a
// backend that has only just seen it (a new process) refuses the key until
// it has seen the lease unchanged for the lease's ttl + margin, then grants
// it with a larger token; the old holder's late renewal fails meanwhile.
func (s suite) testObservedExpiry(t *testing.T) {
	b := s.backend(t)
	if _, ok := b.(backend.ObservedExpiry); !ok {
		// Not a skip: .ci/run fails on any skip, and this case holds for
		// every other backend as ExpiryOnCoordinatorClock.
		t.Log("the backend decides expiry on its store's clock (no backend.ObservedExpiry): nothing to check here")
		return
	}
	h, ok := s.h.(Observer)
	if !ok {
		t.Fatal("the backend implements backend.ObservedExpiry, but its harness does not implement conformance.Observer")
	}
	ctx := context.Background()
	const key = "observed"
	timeout, margin := s.short()
	req := backend.Request{Key: key, LeaseID: "observed-holder", Timeout: timeout, Margin: margin}
	first, err := b.Grant(ctx, req)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	s.wait(t, first.TTL+first.Margin+s.traits.Slack)

	o, err := h.NewObserver(ctx, t, b)
	if err != nil {
		t.Fatalf("NewObserver: %v", err)
	}
	t.Cleanup(func() { _ = o.Close() })
	sent := time.Now()
	_, err = o.Grant(ctx, backend.Request{Key: key, LeaseID: "observer-1", Timeout: long, Margin: time.Second})
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("a new observer's Grant on a lease it has just seen: %v, want a *backend.HeldError (it must wait ttl + margin)", err)
	}
	if full := first.TTL + first.Margin; held.Remaining > full || held.Remaining < full-time.Since(sent)-s.traits.Slack {
		t.Fatalf("HeldError.Remaining = %v from a new observer; want about the whole %v", held.Remaining, full)
	}
	if _, err := b.Renew(ctx, req); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("the old holder's late Renew: %v, want ErrLeaseExpired", err)
	}
	s.wait(t, first.TTL+first.Margin-time.Since(sent)+s.traits.Slack)
	next, err := o.Grant(ctx, backend.Request{Key: key, LeaseID: "observer-2", Timeout: long, Margin: time.Second})
	if err != nil {
		t.Fatalf("the observer's Grant after seeing the lease unchanged for its ttl + margin: %v", err)
	}
	s.wantNext(t, "a grant after an observed expiry", first.Token, next.Token)
	if _, err := b.Renew(ctx, req); !errors.Is(err, backend.ErrLeaseNotFound) {
		t.Fatalf("the old holder's Renew after the takeover: %v, want ErrLeaseNotFound", err)
	}
}
