package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
)

// GuardHarness tells RunGuard how to make guarded stores of one kind.
type GuardHarness interface {
	// NewGuardStore returns a store with no fences and no values (a fresh
	// server, or fresh tables or prefixes on a shared one). Register any
	// cleanup with t.Cleanup.
	NewGuardStore(ctx context.Context, t testing.TB) (GuardStore, error)
}

// GuardStore is a guard together with the data it protects, as the suite
// sees it: one string value per resource, written through the guard.
//
// The suite gives resource names as they come (any bytes, up to
// backend.MaxKeyLength); a harness may map them onto its store (a prefix, a
// Redis hash tag) as long as distinct names stay distinct.
type GuardStore interface {
	// Admit is the guard's Admit: it raises the fence with no write.
	guard.Guard
	// Write stores value as resource's value in the same atomic step as
	// admitting token: a stale token gets an error wrapping
	// guard.ErrStaleToken and stores nothing.
	Write(ctx context.Context, resource string, token uint64, value string) error
	// FailedWrite is a write of value with token that fails after the
	// token was checked, so the store undoes the whole step (a transaction
	// that rolls back, a Txn or script refused as a whole). It returns the
	// failure, or an error wrapping guard.ErrStaleToken when the token was
	// stale; it never returns nil.
	FailedWrite(ctx context.Context, resource string, token uint64, value string) error
	// Read returns resource's value, or "" when none was written.
	Read(ctx context.Context, resource string) (string, error)
}

// RunGuard runs the guard suite against the stores h makes. It checks that
//
//   - a token at least the fence is admitted (the same token again too),
//     and a lower one is refused with guard.ErrStaleToken, per resource;
//   - a write with a stale token is refused and leaves nothing behind;
//   - a write that fails after its token was checked does not move the
//     fence;
//   - an Admit with no write (a new holder fencing at takeover) refuses the
//     previous holder's writes from that moment on;
//   - token 0, bad resource names and done contexts get typed errors and
//     change nothing; odd resource names are distinct resources;
//   - when many writers with interleaved tokens race on a few resources,
//     every admitted token is at least every token admitted before it, every
//     refusal is explained by a higher token admitted before it, readers only
//     ever see admitted writes, in token order, and each resource ends with
//     the value written with its highest admitted token.
func RunGuard(t *testing.T, h GuardHarness) {
	cases := []struct {
		name string
		fn   func(*testing.T, GuardStore)
	}{
		{"AdmitRaisesFence", testAdmit},
		{"StaleWriteLeavesNothing", testStaleWrite},
		{"FailedWriteKeepsFence", testFailedWrite},
		{"FenceAtTakeover", testTakeover},
		{"BadInputChangesNothing", testGuardBadInput},
		{"OddResourcesAreDistinct", testOddResources},
		{"RacingWriters", testRacingWriters},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := h.NewGuardStore(context.Background(), t)
			if err != nil {
				t.Fatalf("NewGuardStore: %v", err)
			}
			c.fn(t, s)
		})
	}
}

// gs wraps a GuardStore with checks that fail the test.
type gs struct {
	t *testing.T
	s GuardStore
}

func (g gs) admit(resource string, token uint64) {
	g.t.Helper()
	if err := g.s.Admit(context.Background(), resource, token); err != nil {
		g.t.Fatalf("Admit(%q, %d): %v", resource, token, err)
	}
}

func (g gs) stale(op string, err error) {
	g.t.Helper()
	if !errors.Is(err, guard.ErrStaleToken) {
		g.t.Fatalf("%s: got %v, want ErrStaleToken", op, err)
	}
}

func (g gs) write(resource string, token uint64, value string) {
	g.t.Helper()
	if err := g.s.Write(context.Background(), resource, token, value); err != nil {
		g.t.Fatalf("Write(%q, %d, %q): %v", resource, token, value, err)
	}
}

func (g gs) value(resource, want string) {
	g.t.Helper()
	got, err := g.s.Read(context.Background(), resource)
	if err != nil {
		g.t.Fatalf("Read(%q): %v", resource, err)
	}
	if got != want {
		g.t.Fatalf("Read(%q) = %q, want %q", resource, got, want)
	}
}

func testAdmit(t *testing.T, s GuardStore) {
	g, ctx := gs{t, s}, context.Background()
	g.admit("r", 1)
	g.admit("r", 1) // the same holder again
	g.admit("r", 3) // tokens need not be dense
	g.stale("Admit 2 after 3", s.Admit(ctx, "r", 2))
	g.stale("Admit 1 after 3", s.Admit(ctx, "r", 1))
	g.admit("r", 3)
	g.admit("other", 1) // resources are independent
	g.stale("Admit 2 after 3, again", s.Admit(ctx, "r", 2))
	g.admit("r", 1<<62)
	g.stale("Admit 3 after 2^62", s.Admit(ctx, "r", 3))
}

func testStaleWrite(t *testing.T, s GuardStore) {
	g, ctx := gs{t, s}, context.Background()
	g.write("r", 2, "b")
	g.stale("Write 1 after 2", s.Write(ctx, "r", 1, "a"))
	g.value("r", "b")
	g.write("r", 2, "b2") // one holder writes many times
	g.value("r", "b2")
	g.write("r", 5, "c")
	g.stale("Write 2 after 5", s.Write(ctx, "r", 2, "b3"))
	g.value("r", "c")
}

func testFailedWrite(t *testing.T, s GuardStore) {
	g, ctx := gs{t, s}, context.Background()
	g.write("r", 1, "a")
	err := s.FailedWrite(ctx, "r", 5, "failed")
	if err == nil || errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("FailedWrite with token 5 over fence 1: got %v, want the write's own failure", err)
	}
	g.value("r", "a")
	g.write("r", 2, "b") // the fence did not move to 5
	g.value("r", "b")
	g.stale("FailedWrite 1 after 2", s.FailedWrite(ctx, "r", 1, "failed"))
	g.value("r", "b")
	// A failed first write leaves no fence either.
	if err := s.FailedWrite(ctx, "fresh", 9, "failed"); err == nil || errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("FailedWrite on a fresh resource: got %v, want the write's own failure", err)
	}
	g.value("fresh", "")
	g.write("fresh", 1, "x")
}

func testTakeover(t *testing.T, s GuardStore) {
	g, ctx := gs{t, s}, context.Background()
	g.write("r", 1, "old holder") // the first holder writes
	g.admit("r", 2)               // a new holder takes over and fences first
	g.value("r", "old holder")    // an Admit writes nothing
	g.stale("the old holder's late write", s.Write(ctx, "r", 1, "late"))
	g.value("r", "old holder")
	g.write("r", 2, "new holder")
	g.value("r", "new holder")
}

func testGuardBadInput(t *testing.T, s GuardStore) {
	g, ctx := gs{t, s}, context.Background()
	g.write("r", 5, "v")
	long := strings.Repeat("k", backend.MaxKeyLength+1)
	for _, c := range []struct {
		name     string
		resource string
		token    uint64
		want     error
	}{
		{"token 0", "r", 0, guard.ErrInvalidToken},
		{"token 0 on a fresh resource", "fresh", 0, guard.ErrInvalidToken},
		{"empty resource", "", 9, backend.ErrInvalidKey},
		{"resource too long", long, 9, backend.ErrInvalidKey},
	} {
		if err := s.Admit(ctx, c.resource, c.token); !errors.Is(err, c.want) {
			t.Errorf("Admit with %s: got %v, want %v", c.name, err, c.want)
		}
		if err := s.Write(ctx, c.resource, c.token, "bad"); !errors.Is(err, c.want) {
			t.Errorf("Write with %s: got %v, want %v", c.name, err, c.want)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Admit(done, "r", 9); !errors.Is(err, context.Canceled) {
		t.Errorf("Admit with a done context: got %v, want context.Canceled", err)
	}
	if err := s.Write(done, "r", 9, "done"); !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a done context: got %v, want context.Canceled", err)
	}
	g.value("r", "v")
	g.value(long[:backend.MaxKeyLength], "")
	g.write("r", 5, "v2") // the fence is still 5
	g.value("r", "v2")
	g.write(long[:backend.MaxKeyLength], 1, "longest") // the longest name is fine
	g.value(long[:backend.MaxKeyLength], "longest")
}

func testOddResources(t *testing.T, s GuardStore) {
	g := gs{t, s}
	// No name starts with '}': on a Redis Cluster such a name has no hash
	// tag of its own (see redisguard.Tag), so nothing can share its slot.
	names := []string{"a", "a/", "/a", "a:", "{a}", "{a", "a}", "a}{", "{}", "a\x00", "a\x00b", "\xff\xfe", "é", "a b", "A"}
	for i, r := range names {
		g.write(r, uint64(100-i), "value of "+r)
	}
	for i, r := range names {
		g.value(r, "value of "+r)
		g.stale("Write "+r+" below its own fence", s.Write(context.Background(), r, uint64(99-i), "stale"))
	}
}
