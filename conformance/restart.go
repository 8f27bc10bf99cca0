package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Restarter is a server that RunRestart crashes and starts again: one
// server of the test's own (the cases of Run share theirs, and would not
// survive a crash in their midst).
type Restarter interface {
	// NewBackend returns a backend on the server, on the same key space
	// at every call: the one RunRestart uses before the crash, and one made
	// after it (a new client, should the server's address have changed).
	// RunRestart closes it.
	NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error)
	// Kill stops the server at once, as a crash does (kill -9 where it
	// can): what it had not made durable is lost.
	Kill(t testing.TB)
	// Start starts the server again on its data.
	Start(t testing.TB)
	// Traits describes the backend, as Harness.Traits does; Now must be
	// nil (a real server).
	Traits() Traits
}

// RunRestart checks what a crash of the server must not lose: a key's
// tokens (the next grant's is larger than every token before the crash,
// and the next one with DenseTokens), a lease that was live across it
// (still live with its token, renewable, held against other grants), and
// the end of a lease that expired while the server was down (superseded by
// the next grant: its renewal refused, its token no longer checking true).
// A new backend and Coordinator, as a restarted holder makes them, take the
// live lease back with Resume and are refused the expired one.
func RunRestart(t *testing.T, r Restarter) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	traits := r.Traits()
	newCoordinator := func() *fencing.Coordinator {
		t.Helper()
		b, err := r.NewBackend(ctx, t)
		if err != nil {
			t.Fatalf("NewBackend: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return fencing.New(b)
	}
	grant := func(c *fencing.Coordinator, key string, timeout, margin time.Duration) fencing.Lease {
		t.Helper()
		l, err := c.Grant(ctx, key, timeout, margin)
		if err != nil {
			t.Fatalf("Grant(%q): %v", key, err)
		}
		return l
	}
	c := newCoordinator()
	for range 3 {
		l := grant(c, "short", time.Minute, 0)
		if err := c.Release(ctx, "short", l.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	total := max(traits.MinTTL, time.Second)
	short := grant(c, "short", total/2, total-total/2)
	shortGranted := time.Now()
	long := grant(c, "long", 10*time.Minute, time.Second)

	r.Kill(t)
	rctx, rcancel := context.WithTimeout(ctx, time.Second)
	if _, err := c.Renew(rctx, "short", short.ID, short.TTL, short.Margin); err == nil {
		t.Fatal("Renew succeeded while the server was down")
	}
	rcancel()
	// Down past the short lease's expiry.
	if err := Sleep(ctx, short.TTL+short.Margin+traits.Slack+time.Second-time.Since(shortGranted)); err != nil {
		t.Fatal(err)
	}
	r.Start(t)
	c = newCoordinator()

	// A server that restores leases with their full TTL (etcd) may keep
	// the short one a while longer: costly for availability, not safety,
	// its holder's Deadline having long passed.
	var next fencing.Lease
	for patience := time.Now().Add(short.TTL + short.Margin + traits.Slack + 10*time.Second); ; {
		l, err := c.Grant(ctx, "short", time.Minute)
		if err == nil {
			next = l
			break
		}
		if !errors.Is(err, fencing.ErrLeaseHeld) || time.Now().After(patience) {
			t.Fatalf("Grant of a key whose lease expired while the server was down: %v", err)
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	// Tokens increase per key (the contract in package backend): on a
	// backend whose tokens come from a store-wide counter (the Kubernetes
	// backend's resourceVersions) the other key's may be larger.
	if next.Token <= short.Token {
		t.Errorf("grant after the restart got token %d; the key's highest before was %d", next.Token, short.Token)
	}
	if traits.DenseTokens && next.Token != short.Token+1 {
		t.Errorf("grant after the restart got token %d, want %d: the counter lost or reissued a grant", next.Token, short.Token+1)
	}
	if _, err := c.Renew(ctx, "short", short.ID, short.TTL, short.Margin); !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Errorf("Renew of a lease that expired while the server was down, superseded since: %v, want ErrLeaseNotFound", err)
	}
	if ok, err := c.CheckToken(ctx, "short", short.Token); err != nil || ok {
		t.Errorf("CheckToken of the expired lease's token = %v, %v; want false", ok, err)
	}

	if tok, live, err := c.Token(ctx, "long"); err != nil || !live || tok != long.Token {
		t.Errorf("Token of the lease live across the restart = %d, %v, %v; want %d, live", tok, live, err, long.Token)
	}
	if renewed, err := c.Renew(ctx, "long", long.ID, 10*time.Minute, time.Second); err != nil || renewed.Token != long.Token {
		t.Errorf("Renew of the lease live across the restart = token %d, %v; want token %d", renewed.Token, err, long.Token)
	}
	if _, err := c.Grant(ctx, "long", time.Minute); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Errorf("Grant of the key held across the restart: %v, want ErrLeaseHeld", err)
	}

	// The holder, restarted too, takes its saved lease back (Resume); the
	// expired one's is refused.
	if _, err := c.Resume(ctx, saved(t, short)); !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Errorf("Resume of a lease that expired while the server was down, superseded since: %v, want ErrLeaseNotFound", err)
	}
	h, err := c.Resume(ctx, saved(t, long))
	if err != nil {
		t.Fatalf("Resume of the lease live across the restart: %v", err)
	}
	if h.Token() != long.Token {
		t.Errorf("Resume of the lease live across the restart = token %d, want %d", h.Token(), long.Token)
	}
	if ok, err := c.CheckToken(ctx, "long", long.Token); err != nil || !ok {
		t.Errorf("CheckToken of the resumed lease's token = %v, %v; want true", ok, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Errorf("Release of the lease live across the restart: %v", err)
	}
}
