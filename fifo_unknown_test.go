package fencing_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/faultbackend"
	"github.com/fencing-go/fencing/memorybackend"
)

// TestLockFIFOUnknownJoinLeaves: a join whose reply is lost (the entry is
// in the line, the waiter cannot know) is taken out again, and the waiter
// joins anew and gets the key: the lost entry does not stay in line, where
// the next waiter would be behind it for Lock's TTL.
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
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h, err := fencing.New(fb).Lock(wctx, "k", time.Hour, fencing.WithFIFO())
	if !lost.Load() || err != nil {
		t.Fatalf("Lock whose join's reply was lost: %v (a reply lost: %v), want the key", err, lost.Load())
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
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
