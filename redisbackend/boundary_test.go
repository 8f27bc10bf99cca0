package redisbackend_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// TestScriptsExpireAtExactMicrosecond pins the server's clock to show
// every script's liveness test at its boundary: a lease whose expiry is
// exp is live at exp-1µs and ended at exp itself, for Token, Inspect,
// Renew, Release, ForceRelease and Grant alike. (Real time cannot show one
// microsecond; TestTokenScriptIsExact shows the same on a running clock.)
func TestScriptsExpireAtExactMicrosecond(t *testing.T) {
	clock := redistest.NewPinnedClock(t)
	srv := redistest.Start(t, redistest.Config{AppendOnly: true, Env: clock.Env()})
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	start := time.Now().Truncate(time.Microsecond)
	clock.Pin(t, start)
	defer clock.Free(t)

	keys := []string{"token", "inspect", "renew", "release", "force", "resend", "grant"}
	exp := map[string]time.Time{}
	for _, k := range keys {
		if _, err := b.Grant(ctx, backend.Request{Key: k, LeaseID: "id-" + k, Timeout: time.Second}); err != nil {
			t.Fatalf("Grant(%q): %v", k, err)
		}
		raw, err := client.HGet(ctx, b.RedisKey(k), "exp").Result()
		if err != nil {
			t.Fatal(err)
		}
		us, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			t.Fatalf("exp %q: %v", raw, err)
		}
		exp[k] = time.UnixMicro(us)
		if want := start.Add(time.Second); !exp[k].Equal(want) {
			t.Fatalf("%s: exp %v, want the pinned instant + 1s = %v (is the clock pinned?)", k, exp[k], want)
		}
	}
	end := exp["token"]

	clock.Pin(t, end.Add(-time.Microsecond)) // the last instant of life
	for _, k := range keys {
		if tok, live, err := b.Token(ctx, k); err != nil || !live || tok != 1 {
			t.Fatalf("Token(%q) 1µs before its expiry: %d, %v, %v; want 1, live", k, tok, live, err)
		}
	}

	clock.Pin(t, end) // expired
	if tok, live, err := b.Token(ctx, "token"); err != nil || live {
		t.Errorf("Token at the expiry instant: %d, %v, %v; want not live", tok, live, err)
	}
	if st, err := b.Inspect(ctx, "inspect"); err != nil || st.Live {
		t.Errorf("Inspect at the expiry instant: %+v, %v; want not live", st, err)
	}
	if _, err := b.Renew(ctx, backend.Request{Key: "renew", LeaseID: "id-renew", Timeout: time.Second}); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Errorf("Renew at the expiry instant: %v, want ErrLeaseExpired", err)
	}
	if err := b.Release(ctx, "release", "id-release"); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Errorf("Release at the expiry instant: %v, want ErrLeaseExpired", err)
	}
	if ended, err := b.ForceRelease(ctx, "force"); err != nil || ended {
		t.Errorf("ForceRelease at the expiry instant: %v, %v; want nothing live to end", ended, err)
	}
	if _, err := b.Grant(ctx, backend.Request{Key: "resend", LeaseID: "id-resend", Timeout: time.Second}); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Errorf("resent Grant at the expiry instant: %v, want ErrLeaseExpired", err)
	}
	if l, err := b.Grant(ctx, backend.Request{Key: "grant", LeaseID: "next", Timeout: time.Second}); err != nil || l.Token != 2 {
		t.Errorf("Grant by another holder at the expiry instant: %+v, %v; want token 2", l, err)
	}
}
