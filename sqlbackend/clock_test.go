package sqlbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

func newSQLiteBackend(t *testing.T, opts ...sqlbackend.Option) *sqlbackend.Backend {
	t.Helper()
	b, err := sqlbackend.New(context.Background(), openSQLite(t), sqlbackend.SQLite, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTables(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

// A step of the wall clock, either way, neither ends a live lease early nor
// keeps it live past its end on the boot clock; ExpiresAt follows the wall
// clock for display only.
func TestSQLiteWallClockStepDoesNotMoveLeases(t *testing.T) {
	for _, step := range []time.Duration{-2 * time.Hour, 2 * time.Hour} {
		clock := newFakeClock()
		b := newSQLiteBackend(t, sqlbackend.WithHostClock(clock))
		ctx := context.Background()
		req := backend.Request{Key: "k", LeaseID: "a", Timeout: 10 * time.Second, Margin: time.Second}
		lease, err := b.Grant(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		clock.StepWall(step)
		clock.Advance(11*time.Second - time.Nanosecond)
		if tok, live, err := b.Token(ctx, "k"); err != nil || !live || tok != lease.Token {
			t.Fatalf("step %v: Token 1ns before the end = %d, %v, %v; want %d, live", step, tok, live, err, lease.Token)
		}
		st, err := b.Inspect(ctx, "k")
		if err != nil || st.Remaining != time.Nanosecond || !st.ExpiresAt.Equal(lease.ExpiresAt.Add(step)) {
			t.Fatalf("step %v: Inspect = %+v, %v; want 1ns left, ExpiresAt moved by the step", step, st, err)
		}
		clock.Advance(time.Nanosecond)
		if _, live, err := b.Token(ctx, "k"); err != nil || live {
			t.Fatalf("step %v: Token at the end = live %v, %v; want expired", step, live, err)
		}
		if _, err := b.Renew(ctx, req); !errors.Is(err, backend.ErrLeaseExpired) {
			t.Fatalf("step %v: Renew after the end: %v, want ErrLeaseExpired", step, err)
		}
	}
}

// After a reboot every lease is expired, though the new boot's clock reads
// less than the lease's end; the counter goes on.
func TestSQLiteRebootExpiresLeases(t *testing.T) {
	clock := newFakeClock()
	b := newSQLiteBackend(t, sqlbackend.WithHostClock(clock))
	ctx := context.Background()
	req := backend.Request{Key: "k", LeaseID: "a", Timeout: time.Hour}
	first, err := b.Grant(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	clock.Reboot()
	if _, live, err := b.Token(ctx, "k"); err != nil || live {
		t.Fatalf("Token after a reboot: live %v, %v; want expired", live, err)
	}
	if _, err := b.Grant(ctx, req); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("resent Grant after a reboot: %v, want ErrLeaseExpired", err)
	}
	next, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "b", Timeout: time.Hour})
	if err != nil || next.Token != first.Token+1 {
		t.Fatalf("Grant after a reboot = %+v, %v; want token %d", next, err, first.Token+1)
	}
}

// The system clock's readings move forward with time and keep the boot.
func TestSystemClock(t *testing.T) {
	c := sqlbackend.SystemClock()
	boot1, since1, _ := c.Now()
	time.Sleep(2 * time.Millisecond)
	boot2, since2, _ := c.Now()
	if boot1 == "" || boot1 != boot2 || since2-since1 < 2*time.Millisecond {
		t.Fatalf("SystemClock: %q %v then %q %v", boot1, since1, boot2, since2)
	}
}
