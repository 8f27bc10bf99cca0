package sqlbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestPostgresSameOwnerTwoProcesses: a restarted process reuses its
// owner name while its old self still runs, both behind one pgbouncer. The
// name is a label, not a credential: the new process is refused while the
// old one holds, and once an operator has forced the old lease out and the
// new process holds, the old one's renewal fails and its Held's context
// ends, while the new lease stays live.
func TestPostgresSameOwnerTwoProcesses(t *testing.T) {
	const owner, ttl = "worker-1", 2 * time.Second
	ctx := context.Background()
	srv := pgtest.Start(t)
	bouncer := pgtest.StartBouncer(t, srv, 2)
	coordinator := func() (*fencing.Coordinator, *sqlbackend.Backend) {
		b, err := sqlbackend.New(context.Background(), bouncer.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if err := b.CreateTables(ctx); err != nil {
			t.Fatal(err)
		}
		return fencing.New(b, fencing.WithDefaultOwner(owner)), b
	}
	oldC, _ := coordinator()
	newC, newB := coordinator()
	old, err := oldC.Hold(ctx, "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Release(ctx)
	if h, err := newC.Hold(ctx, "job", ttl); !errors.Is(err, fencing.ErrLeaseHeld) {
		if h != nil {
			h.Release(ctx)
		}
		t.Fatalf("Hold by the restarted process, same owner, while the old one holds: %v; want ErrLeaseHeld", err)
	}
	if ended, err := newC.ForceRelease(ctx, "job"); err != nil || !ended {
		t.Fatalf("ForceRelease = %v, %v", ended, err)
	}
	h, err := newC.Hold(ctx, "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if h.Token() <= old.Token() {
		t.Fatalf("the new lease's token %d is not above the old one's %d", h.Token(), old.Token())
	}
	// The old Held learns at its next renewal, or by its Deadline at the
	// latest; the bound allows a busy machine ten times that.
	forced := time.Now()
	select {
	case <-old.Context().Done():
		t.Logf("the old Held ended %v after the forced release", time.Since(forced).Round(time.Millisecond))
	case <-time.After(time.Until(old.Lease().Deadline) + 10*ttl):
		t.Fatalf("the old process's Held still live %v past its Deadline; its renewals succeed on the new lease", 10*ttl)
	}
	if err := old.Err(); !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Errorf("the old Held ended with %v, want ErrLeaseNotFound (its renewal refused)", err)
	}
	st, err := newB.Inspect(ctx, "job")
	if err != nil || !st.Live || st.Token != h.Token() || st.Owner != owner || h.Context().Err() != nil {
		t.Fatalf("Inspect = %+v, %v (new Held's context: %v); want the new lease live, token %d, owner %q", st, err, h.Context().Err(), h.Token(), owner)
	}
}
