package redisbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// TestServerClockSteps: redis-server's wall clock steps an hour forward
// and then back, mid-lease (an LD_PRELOAD shim pins it: libfaketime breaks
// redis-server). The forward step may end a lease early, and does; the
// backward step makes the lease granted meanwhile read an hour longer.
// Through both, no token is reissued or goes back, an ended lease is never
// renewed or granted again, and a token check passes only for the live
// lease's token.
func TestServerClockSteps(t *testing.T) {
	ctx := context.Background()
	clock := redistest.NewPinnedClock(t)
	cfg := persistent
	cfg.Env = clock.Env()
	srv := redistest.Start(t, cfg)
	client := srv.Client()
	b := newBackend(t, client)
	step := func(offset time.Duration) {
		t.Helper()
		at := time.Now().Add(offset)
		clock.Pin(t, at)
		st, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !st.Equal(at.Truncate(time.Microsecond)) {
			t.Fatalf("the server's TIME is %v after pinning it at %v: the shim does not work", st, at)
		}
	}
	admits := func(token uint64) bool {
		t.Helper()
		tok, live, err := b.Token(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return live && tok == token
	}

	step(0)
	reqA := backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute}
	a, err := b.Grant(ctx, reqA)
	if err != nil {
		t.Fatal(err)
	}
	step(time.Hour)
	if _, err := b.Renew(ctx, reqA); err == nil {
		t.Fatal("Renew of a succeeded after the server's clock stepped an hour past its end")
	}
	reqB := backend.Request{Key: "k", LeaseID: "b", Timeout: time.Minute}
	bl, err := b.Grant(ctx, reqB)
	if err != nil || bl.Token <= a.Token {
		t.Fatalf("Grant after the forward step = %+v, %v; want a token above %d", bl, err, a.Token)
	}
	if admits(a.Token) || !admits(bl.Token) {
		t.Fatalf("after the forward step: a's token %d admitted %v, b's %d admitted %v; want only b's", a.Token, admits(a.Token), bl.Token, admits(bl.Token))
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
	if admits(a.Token) || !admits(bl.Token) {
		t.Fatalf("after the backward step: a's token %d admitted %v, b's %d admitted %v; want only b's", a.Token, admits(a.Token), bl.Token, admits(bl.Token))
	}
	if err := b.Release(ctx, "k", "b"); err != nil {
		t.Fatal(err)
	}
	c, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "c", Timeout: time.Minute})
	if err != nil || c.Token <= bl.Token {
		t.Fatalf("Grant after b's release = %+v, %v; want a token above %d", c, err, bl.Token)
	}
	clock.Free(t)
}
