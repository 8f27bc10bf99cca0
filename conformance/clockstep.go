package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// ClockStepper is a server whose wall clock RunClockStep steps: one server
// of the test's own, run under a clock the test sets (libfaketime, an
// LD_PRELOAD shim).
type ClockStepper interface {
	// NewBackend returns a backend on the server over an empty key space.
	// RunClockStep closes it.
	NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error)
	// StepClock sets the server's wall clock to offset from real time, and
	// returns once the server reads its clock there.
	StepClock(t testing.TB, offset time.Duration)
}

// StoreAdmitter is a ClockStepper whose store also checks a token by
// itself, against the coordinator's record (sqlbackend's AdmitTx):
// RunClockStep then requires that check to agree with Token.
type StoreAdmitter interface {
	// Admits reports whether the store admits token for key, checked
	// through b (a backend NewBackend made).
	Admits(ctx context.Context, t testing.TB, b backend.Backend, key string, token uint64) bool
}

// RunClockStep steps the server's wall clock an hour forward and then
// back, mid-lease. The forward step may end a lease early, and does; the
// backward step makes the lease granted meanwhile read an hour longer.
// Through both, no token is reissued or goes back, an ended lease is never
// renewed or granted again, and Token (and the store's own check, on a
// StoreAdmitter) admits only the live lease's token.
func RunClockStep(t *testing.T, s ClockStepper) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := s.NewBackend(ctx, t)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	defer b.Close()
	grant := func(id string) (backend.Lease, error) {
		return b.Grant(ctx, backend.Request{Key: "k", LeaseID: id, Timeout: time.Minute})
	}
	// onlyLive fails the test unless the live lease's token, and no other,
	// is admitted.
	onlyLive := func(when string, ended, live uint64) {
		t.Helper()
		if tok, ok, err := b.Token(ctx, "k"); err != nil || !ok || tok != live {
			t.Fatalf("Token %s = %d, %v, %v; want %d, live", when, tok, ok, err, live)
		}
		if sa, ok := s.(StoreAdmitter); ok {
			if sa.Admits(ctx, t, b, "k", ended) || !sa.Admits(ctx, t, b, "k", live) {
				t.Fatalf("%s: the store admits the ended lease's token %d: %v, the live one's %d: %v; want only the live one's",
					when, ended, sa.Admits(ctx, t, b, "k", ended), live, sa.Admits(ctx, t, b, "k", live))
			}
		}
	}

	s.StepClock(t, 0)
	a, err := grant("a")
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	s.StepClock(t, time.Hour)
	reqA := backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute}
	if _, err := b.Renew(ctx, reqA); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("Renew of a after the server's clock stepped an hour past its end: %v, want ErrLeaseExpired", err)
	}
	bl, err := grant("b")
	if err != nil || bl.Token <= a.Token {
		t.Fatalf("Grant after the forward step = %+v, %v; want a token above %d", bl, err, a.Token)
	}
	onlyLive("after the forward step", a.Token, bl.Token)

	s.StepClock(t, 0) // an hour back: b now reads an hour and a minute long
	if _, err := b.Renew(ctx, reqA); err == nil {
		t.Fatal("Renew of the ended lease a succeeded after the backward step")
	}
	if l, err := grant("a"); err == nil {
		t.Fatalf("a resent grant of the ended lease a succeeded after the backward step: %+v", l)
	}
	if _, err := grant("c"); !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("Grant while b is live, after the backward step: %v, want ErrLeaseHeld", err)
	}
	onlyLive("after the backward step", a.Token, bl.Token)
	if err := b.Release(ctx, "k", "b"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if c, err := grant("c"); err != nil || c.Token <= bl.Token {
		t.Fatalf("Grant after b's release = %+v, %v; want a token above %d", c, err, bl.Token)
	}
}
