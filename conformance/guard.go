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

// GuardDropper is a GuardStore that deletes a resource together with its
// fence, in one atomic step (see "Dropping a fence" in docs/guards.md).
// RunGuard runs its case on stores that implement it; every store guard's
// harness should.
type GuardDropper interface {
	// Drop deletes resource's value and its fence in the same atomic step as
	// admitting token: a stale token gets an error wrapping
	// guard.ErrStaleToken and deletes nothing.
	Drop(ctx context.Context, resource string, token uint64) error
	// FailedDrop is a Drop that fails after the token was checked, so the
	// store undoes the whole step: the value and the fence stay. It returns
	// the failure, or an error wrapping guard.ErrStaleToken when the token
	// was stale; it never returns nil.
	FailedDrop(ctx context.Context, resource string, token uint64) error
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
//     the value written with its highest admitted token;
//   - on a store that drops a fence with its resource (GuardDropper), the
//     drop is admitted like a write (a stale one deletes nothing), takes the
//     value and the fence together, fails as a whole, and leaves other
//     resources' fences alone.
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
		{"DropGoesWithResource", testDrop},
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
	for _, c := range badGuardInputs() {
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

// badGuardInput is a resource and token that a guard refuses with want,
// changing nothing.
type badGuardInput struct {
	name     string
	resource string
	token    uint64
	want     error
}

func badGuardInputs() []badGuardInput {
	return []badGuardInput{
		{"token 0", "r", 0, guard.ErrInvalidToken},
		{"token 0 on a fresh resource", "fresh", 0, guard.ErrInvalidToken},
		{"empty resource", "", 9, backend.ErrInvalidKey},
		{"resource too long", strings.Repeat("k", backend.MaxKeyLength+1), 9, backend.ErrInvalidKey},
	}
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

func testDrop(t *testing.T, s GuardStore) {
	d, ok := s.(GuardDropper)
	if !ok {
		t.Skip("harness capability: the store does not drop a fence with its resource (conformance.GuardDropper)")
	}
	g, ctx := gs{t, s}, context.Background()
	g.write("r", 5, "v")
	g.write("other", 5, "w")
	g.stale("Drop with 3 under fence 5", d.Drop(ctx, "r", 3))
	g.value("r", "v")
	if err := d.FailedDrop(ctx, "r", 6); err == nil || errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("FailedDrop with 6 over fence 5: got %v, want the drop's own failure", err)
	}
	g.value("r", "v")
	g.stale("Write 4 after a failed drop", s.Write(ctx, "r", 4, "stale")) // the fence stayed
	for _, c := range badGuardInputs() {
		if err := d.Drop(ctx, c.resource, c.token); !errors.Is(err, c.want) {
			t.Errorf("Drop with %s: got %v, want %v", c.name, err, c.want)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.Drop(done, "r", 9); !errors.Is(err, context.Canceled) {
		t.Errorf("Drop with a done context: got %v, want context.Canceled", err)
	}
	g.value("r", "v")

	if err := d.Drop(ctx, "r", 5); err != nil { // the holder of the fence's own token
		t.Fatalf("Drop(r, 5): %v", err)
	}
	g.value("r", "")
	// The fence went with the value: a token below the dropped fence is
	// admitted again, which is why a name that may be used again keeps its
	// fence (docs/guards.md).
	g.write("r", 2, "after the drop")
	g.value("r", "after the drop")
	g.write("r", 7, "re-created") // a fresh lease's token, above the old fence
	g.stale("Write 6 after 7", s.Write(ctx, "r", 6, "stale"))
	g.value("r", "re-created")
	// Other resources keep their fences and values.
	g.stale("Write 4 on the other resource", s.Write(ctx, "other", 4, "stale"))
	g.value("other", "w")
	// Dropping what holds nothing is a no-op, and so is dropping twice.
	for range 2 {
		if err := d.Drop(ctx, "never written", 1); err != nil {
			t.Fatalf("Drop of a resource never written: %v", err)
		}
	}
	g.value("never written", "")
}
