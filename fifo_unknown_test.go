package fencing_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/faultbackend"
	"github.com/fencing-go/fencing/memorybackend"
)

// TestLockFIFOUnknownJoinLeaves: a join whose reply is lost (the entry is
// in the line, the waiter cannot know) fails Lock with an unknown outcome
// and takes the entry out again, so the next waiter is at the head at once
// rather than behind it for Lock's TTL.
func TestLockFIFOUnknownJoinLeaves(t *testing.T) {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	var lost atomic.Bool
	fb := faultbackend.New(mem, func(_ context.Context, op faultbackend.Op, _ string, err error) error {
		if op == faultbackend.Enqueue && err == nil && lost.CompareAndSwap(false, true) {
			return faultbackend.ErrLostReply
		}
		return err
	})
	_, err := fencing.New(fb).Lock(ctx, "k", time.Hour, fencing.WithFIFO())
	if !lost.Load() || !errors.Is(err, fencing.ErrOutcomeUnknown) {
		t.Fatalf("Lock whose join's reply was lost: %v (a reply lost: %v), want ErrOutcomeUnknown", err, lost.Load())
	}
	p, err := mem.Enqueue(ctx, "k", "probe", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Dequeue(ctx, "k", "probe")
	if p.Ahead != 0 {
		t.Fatalf("the next waiter has %d ahead (%v left), want 0: the failed join stayed in line", p.Ahead, p.AheadRemaining)
	}
}
