package sqlbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// TestPostgresRenewMovesLockDelay: a renewal moves the lock delay with the
// lease's end, on the server's real clock. The renewal here shortens the
// lease (a minute, renewed for 200ms), so a delay left where the grant put
// it would end a minute late; the holder then stops renewing, as a crashed
// one would, and once the lease has expired the key is closed until
// exactly the renewed end plus the delay.
func TestPostgresRenewMovesLockDelay(t *testing.T) {
	const delay = 10 * time.Second
	ctx := context.Background()
	_, h := newPostgres(t)
	b, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	req := backend.Request{Key: "k", LeaseID: "crashes", Timeout: time.Minute, LockDelay: delay}
	if _, err := b.Grant(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Timeout = 200 * time.Millisecond
	renewed, err := b.Renew(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var st backend.KeyState
	for st = inspect(t, b, "k"); st.Live; st = inspect(t, b, "k") {
		time.Sleep(time.Until(renewed.ExpiresAt) + 10*time.Millisecond) // the server's clock may differ a little
	}
	if want := renewed.ExpiresAt.Add(delay); !st.DelayedUntil.Equal(want) {
		t.Fatalf("after the renewed lease expired, the key is delayed until %v; want the renewed end + %v = %v (the grant's end + %v is a minute later)",
			st.DelayedUntil, delay, want, delay)
	}
}

func inspect(t *testing.T, b backend.Backend, key string) backend.KeyState {
	t.Helper()
	st, err := b.(backend.Inspector).Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
