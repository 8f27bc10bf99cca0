package natsbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/election"
	"github.com/fencing-go/fencing/semaphore"
)

// TestElection: package election, unchanged, on a KV bucket: one leader at
// a time, the next term's token larger, the leader's identity as the owner.
func TestElection(t *testing.T) {
	b := newBackend(t)
	c := fencing.New(b)
	ctx := context.Background()
	e := election.New(c, "leader", 2*time.Second)
	first, err := e.Campaign(ctx, "candidate-a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	l, err := e.Leader(ctx)
	if err != nil || !l.Live || l.Identity != "candidate-a" || l.Token != first.Token() {
		t.Fatalf("Leader = %+v, %v; want candidate-a with token %d", l, err, first.Token())
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = e.Campaign(cctx, "candidate-b")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second Campaign while a leader renews: %v, want it to wait out its context", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	second, err := e.Campaign(ctx, "candidate-b")
	if err != nil {
		t.Fatalf("Campaign after the release: %v", err)
	}
	defer second.Release(ctx)
	if second.Token() <= first.Token() {
		t.Fatalf("second term's token %d, first's %d", second.Token(), first.Token())
	}
}

// TestSemaphore: package semaphore, unchanged, on a KV bucket: N permits and no
// more.
func TestSemaphore(t *testing.T) {
	b := newBackend(t)
	c := fencing.New(b)
	ctx := context.Background()
	s, err := semaphore.New(c, "pool", 2)
	if err != nil {
		t.Fatal(err)
	}
	var held []*fencing.Held
	for range 2 {
		h, err := s.TryAcquire(ctx, 2*time.Second)
		if err != nil {
			t.Fatalf("TryAcquire of a free permit: %v", err)
		}
		held = append(held, h)
	}
	if _, err := s.TryAcquire(ctx, 2*time.Second); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("TryAcquire of a third permit: %v, want ErrLeaseHeld", err)
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := s.TryAcquire(ctx, 2*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after a release: %v", err)
	}
	_ = h.Release(ctx)
	_ = held[1].Release(ctx)
}
