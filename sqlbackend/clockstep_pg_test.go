package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/testing/faketime"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestPostgresServerClockSteps: the server's wall clock steps an hour
// forward and then back, mid-lease (libfaketime under postgres). The
// forward step may end a lease early, and does; the backward step makes
// the lease granted meanwhile read an hour longer. Through both, no token
// is reissued or goes back, an ended lease is never renewed or granted
// again, and AdmitTx admits only the live lease's token.
func TestPostgresServerClockSteps(t *testing.T) {
	ctx := context.Background()
	clock, _, h := newSkewedPostgres(t, 0)
	bb, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	defer bb.Close()
	b := bb.(*sqlbackend.Backend)
	step := func(offset time.Duration) {
		t.Helper()
		stepServerClock(t, h.db, clock, offset)
	}
	admits := func(token uint64) bool {
		t.Helper()
		tx, err := h.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = b.AdmitTx(ctx, tx, "k", token)
		if err != nil && !errors.Is(err, guard.ErrStaleToken) {
			t.Fatalf("AdmitTx(%d): %v", token, err)
		}
		return err == nil
	}

	reqA := backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute}
	a, err := b.Grant(ctx, reqA)
	if err != nil {
		t.Fatal(err)
	}
	step(time.Hour)
	if _, err := b.Renew(ctx, reqA); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("Renew of a after the server's clock stepped an hour past its end: %v, want ErrLeaseExpired", err)
	}
	reqB := backend.Request{Key: "k", LeaseID: "b", Timeout: time.Minute}
	bl, err := b.Grant(ctx, reqB)
	if err != nil || bl.Token <= a.Token {
		t.Fatalf("Grant after the forward step = %+v, %v; want a token above %d", bl, err, a.Token)
	}
	if admits(a.Token) || !admits(bl.Token) {
		t.Fatalf("after the forward step: AdmitTx(a's %d) = %v, AdmitTx(b's %d) = %v; want only b's", a.Token, admits(a.Token), bl.Token, admits(bl.Token))
	}

	step(0) // an hour back: b now reads an hour and a minute long
	if _, err := b.Renew(ctx, reqA); err == nil {
		t.Fatal("Renew of the ended lease a succeeded after the backward step")
	}
	if l, err := b.Grant(ctx, reqA); err == nil {
		t.Fatalf("a resent grant of the ended lease a succeeded after the backward step: %+v", l)
	}
	if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "c", Timeout: time.Minute}); !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("Grant while b is live, after the backward step: %v, want ErrLeaseHeld", err)
	}
	if tok, live, err := b.Token(ctx, "k"); err != nil || !live || tok != bl.Token {
		t.Fatalf("Token after the backward step = %d, %v, %v; want b's %d, live", tok, live, err, bl.Token)
	}
	if admits(a.Token) || !admits(bl.Token) {
		t.Fatalf("after the backward step: AdmitTx(a's %d) = %v, AdmitTx(b's %d) = %v; want only b's", a.Token, admits(a.Token), bl.Token, admits(bl.Token))
	}
	if err := b.Release(ctx, "k", "b"); err != nil {
		t.Fatal(err)
	}
	c, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "c", Timeout: time.Minute})
	if err != nil || c.Token <= bl.Token {
		t.Fatalf("Grant after b's release = %+v, %v; want a token above %d", c, err, bl.Token)
	}
}

// stepServerClock steps the server's wall clock to offset from ours and
// waits until a statement reads it there.
func stepServerClock(t *testing.T, db *sql.DB, clock *faketime.Clock, offset time.Duration) {
	t.Helper()
	if err := clock.Set(offset); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var server time.Time
		if err := db.QueryRow(`SELECT clock_timestamp()`).Scan(&server); err != nil {
			t.Fatal(err)
		}
		skew := server.Sub(time.Now())
		if skew > offset-time.Minute && skew < offset+time.Minute {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's clock is %v from ours a minute after a step to %v", skew, offset)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
