package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
	"github.com/fencing-go/fencing/semaphore"
)

// TestHoldersSkipsForeignKeys: leases under the semaphore's prefix whose
// key is not a slot's, though its tail parses as a number (name/+1,
// name/01, name/-1, name/1x), are not permits: Holders lists only the slot.
func TestHoldersSkipsForeignKeys(t *testing.T) {
	ctx := context.Background()
	c := recipetest.Memory(t).Coordinator(t)
	s := newSem(t, c, "pool", 3)
	for _, key := range []string{"pool/+1", "pool/01", "pool/-1", "pool/1x", "pool/"} {
		h, err := c.Hold(ctx, key, time.Hour)
		if err != nil {
			t.Fatalf("hold %q: %v", key, err)
		}
		defer h.Release(ctx)
	}
	p, err := s.TryAcquire(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	hs, err := s.Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Key != p.Lease().Key || hs[0].Key != semaphore.SlotKey("pool", hs[0].Slot) {
		t.Fatalf("Holders = %+v; want only the permit on %q", hs, p.Lease().Key)
	}
}

// acquireWatchdog bounds one Acquire of TestNeverMoreThanSize: a whole run
// takes under a second on an idle machine, so a waiter still without a
// permit after this long was never given its turn (a hang the package's
// timeout would otherwise end, telling nothing).
const acquireWatchdog = 30 * time.Second

var errNoTurn = errors.New("watchdog: no permit within 30s; was the waiter's turn in its Semaphore's line never handed on?")

// acquireWatched is s.Acquire for id, failing with errNoTurn after
// acquireWatchdog. The permit lives under the context Acquire was given, so
// the watchdog cancels it only while Acquire waits.
func acquireWatched(ctx context.Context, s *semaphore.Semaphore, id string) (*fencing.Held, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	watchdog := time.AfterFunc(acquireWatchdog, func() { cancel(errNoTurn) })
	h, err := s.Acquire(ctx, 30*time.Second, fencing.WithOwner(id))
	watchdog.Stop()
	if err != nil {
		if context.Cause(ctx) == errNoTurn {
			err = fmt.Errorf("%w (%w)", errNoTurn, err)
		}
		cancel(nil)
	}
	return h, err
}
