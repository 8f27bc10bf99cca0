package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// TestLockFIFOHeadSleepsOutLockDelay: the head of a FIFO line, finding a
// live lease that will expire (its holder crashed) with a lock delay after
// it, sleeps until both have passed and then grants once: no attempt is
// refused, the delay included. The lease's time left is shorter than the
// poll interval, so the head's one sleep is for the lease and the delay.
func TestLockFIFOHeadSleepsOutLockDelay(t *testing.T) {
	const ttl, delay = 100 * time.Millisecond, 300 * time.Millisecond
	ctx := context.Background()
	clock := newRunningClock()
	g := &grantLog{Backend: memorybackend.New(memorybackend.WithClock(clock)), clock: clock}
	defer g.Close()
	c := fencing.New(g, fencing.WithDefaultLockDelay(delay))
	crashed, err := c.Grant(ctx, "k", ttl, 0) // never renewed nor released
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Lock(ctx, "k", time.Minute, fencing.WithFIFO(), fencing.WithPollInterval(10*time.Second))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer h.Release(ctx)
	grants := g.grants()
	for _, gr := range grants[1 : len(grants)-1] {
		var held *backend.HeldError
		errors.As(gr.err, &held)
		t.Errorf("an attempt refused %v after the lease's end (delayed: %v): %v",
			gr.at.Sub(crashed.ExpiresAt), held != nil && held.Delayed, gr.err)
	}
	opened := crashed.ExpiresAt.Add(delay)
	if last := grants[len(grants)-1]; last.err != nil || last.at.Before(opened) {
		t.Errorf("the head's grant: %v at %v, want success at or after %v", last.err, last.at, opened)
	}
}
