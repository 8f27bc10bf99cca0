package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Reopener is implemented by a harness that can make a second backend on
// the key space of one its NewBackend made, as a process that has just
// started makes it (a new backend, and a new client where the harness can).
// The ResumeAfterRestart case resumes leases through it; without it, through
// the harness's Observer (a backend.ObservedExpiry store), or else through a
// new Coordinator over the same backend (a store that lives in the process,
// such as memorybackend's, ends with it).
type Reopener interface {
	// Reopen returns another backend over the same key space as b. The
	// suite closes it.
	Reopen(ctx context.Context, t testing.TB, b backend.Backend) (backend.Backend, error)
}

// reopen returns a backend over b's key space for a process that has just
// started, and whether it is a backend of its own (else it is b).
func (s suite) reopen(t *testing.T, b backend.Backend) (backend.Backend, bool) {
	t.Helper()
	var (
		o   backend.Backend
		err error
	)
	switch h := s.h.(type) {
	case Reopener:
		o, err = h.Reopen(context.Background(), t, b)
	case Observer:
		o, err = h.NewObserver(context.Background(), t, b)
	default:
		t.Log("the harness implements neither conformance.Reopener nor conformance.Observer: resuming through a new Coordinator over the same backend")
		return b, false
	}
	if err != nil {
		t.Fatalf("a second backend on the key space: %v", err)
	}
	t.Cleanup(func() { _ = o.Close() })
	return o, true
}

// saved is what a holder saves of l to resume it (see fencing.Coordinator's
// Resume), through JSON as a file would keep it.
func saved(t *testing.T, l fencing.Lease) fencing.Lease {
	t.Helper()
	b, err := json.Marshal(fencing.Lease{Key: l.Key, ID: l.ID, Token: l.Token, TTL: l.TTL, Margin: l.Margin})
	if err != nil {
		t.Fatal(err)
	}
	var out fencing.Lease
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// testResumeAfterRestart: a process that saved its leases and stopped
// (its backend closed, its leases neither renewed nor released) starts
// again with a new backend and Coordinator: Resume takes a live lease back
// with its token and renews it; an expired lease, a superseded one, one
// with a foreign ID or another key's get the contract's errors and change
// nothing; one with a wrong token is released.
func (s suite) testResumeAfterRestart(t *testing.T) {
	ctx := context.Background()
	a, err := s.h.NewBackend(ctx, t)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = a.Close()
		}
	})
	old := fencing.New(a)
	live := s.grant(t, old, "live", long, time.Second)
	expired, _ := s.grantShort(t, old, "expired")
	other := s.grant(t, old, "other", long, time.Second)

	b, own := s.reopen(t, a)
	if own {
		closed = true
		if err := a.Close(); err != nil { // the process ends; closing its backend releases nothing
			t.Fatalf("Close: %v", err)
		}
	}
	c := fencing.New(b)
	// A backend.ObservedExpiry backend times what it reads from here.
	if _, _, err := c.Token(ctx, "expired"); err != nil {
		t.Fatalf("Token: %v", err)
	}
	seen := time.Now()

	// A live lease comes back with its token, renewed from now.
	s.wait(t, 10*time.Millisecond) // the renewal's expiry is later than the grant's
	h, err := c.Resume(ctx, saved(t, live))
	if err != nil {
		t.Fatalf("Resume of a live lease: %v", err)
	}
	t.Cleanup(func() { _ = h.Release(ctx) })
	if got := h.Lease(); got.Token != live.Token || got.ID != live.ID || !got.ExpiresAt.After(live.ExpiresAt) {
		t.Fatalf("resumed lease = token %d, ExpiresAt %v; want token %d and an ExpiresAt later than the grant's %v",
			got.Token, got.ExpiresAt, live.Token, live.ExpiresAt)
	}
	wantLive(t, c, "live", live.Token)
	if _, err := c.Grant(ctx, "live", long); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("Grant of the resumed key: %v, want ErrLeaseHeld", err)
	}

	// A foreign ID, another key's ID and a wrong token change nothing.
	foreign := saved(t, other)
	foreign.ID = expired.ID
	_, err = c.Resume(ctx, foreign)
	wantErr(t, "Resume with a foreign ID", err, fencing.ErrLeaseNotFound)
	foreign.ID = live.ID
	_, err = c.Resume(ctx, foreign)
	wantErr(t, "Resume with another key's ID", err, fencing.ErrLeaseNotFound)
	wantLive(t, c, "other", other.Token)
	// A saved token that is not the lease's: the lease is its caller's (the
	// ID is the credential), but the caller's record is wrong; Resume
	// releases the lease it renewed.
	wrong := saved(t, other)
	wrong.Token++
	_, err = c.Resume(ctx, wrong)
	wantErr(t, "Resume with a wrong token", err, fencing.ErrLeaseNotFound)
	wantFree(t, c, "other")

	// A lease whose time ran out: refused, and not revived.
	s.waitExpired(t, expired, seen) // seen is after the grant returned
	_, err = c.Resume(ctx, saved(t, expired))
	wantErr(t, "Resume of an expired lease", err, fencing.ErrLeaseExpired)
	wantFree(t, c, "expired")
	next := s.grant(t, c, "expired", long, time.Second)
	s.wantNext(t, "a grant after a refused Resume", expired.Token, next.Token)
	_, err = c.Resume(ctx, saved(t, expired))
	wantErr(t, "Resume of a superseded lease", err, fencing.ErrLeaseNotFound)
	wantLive(t, c, "expired", next.Token)

	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release of the resumed lease: %v", err)
	}
	wantFree(t, c, "live")
}
