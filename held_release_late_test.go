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

// heldRelease is a backend whose Release waits until the test lets it go:
// a release on its way to the store while the process or the store stalls.
type heldRelease struct {
	backend.Backend
	arrived chan struct{}
	gate    chan struct{}
}

func (b *heldRelease) Release(ctx context.Context, key, leaseID string) error {
	b.arrived <- struct{}{}
	select {
	case <-b.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.Backend.Release(ctx, key, leaseID)
}

// A Held whose release reaches the store after its Deadline, when another
// lease has the key, was lost: Release says so (ErrLeaseLost, the Deadline
// passed), as it would had the expiry timer run first, and not with the
// store's bare "lease not found", which a lease still before its Deadline
// must never get.
func TestHeldReleaseAfterDeadlineIsALoss(t *testing.T) {
	mem := memorybackend.New()
	t.Cleanup(func() { mem.Close() })
	slow := &heldRelease{Backend: mem, arrived: make(chan struct{}, 1), gate: make(chan struct{})}
	c := fencing.New(slow)
	h, err := c.Hold(context.Background(), "k", 50*time.Millisecond, fencing.WithMargin(time.Millisecond))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	released := make(chan error, 1)
	go func() { released <- h.Release(context.Background()) }()
	<-slow.arrived // the holder released before its Deadline
	// The store lets the lease expire; another client takes the key.
	other := fencing.New(mem)
	var next fencing.Lease
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if next, err = other.Grant(context.Background(), "k", time.Minute, time.Second); err == nil {
			break
		}
		if !errors.Is(err, fencing.ErrLeaseHeld) || time.Now().After(end) {
			t.Fatalf("Grant after the held lease's expiry: %v", err)
		}
	}
	close(slow.gate)
	err = <-released
	if !errors.Is(err, fencing.ErrLeaseLost) {
		t.Fatalf("Release that reached the store after the Deadline = %v, want an error wrapping ErrLeaseLost", err)
	}
	if !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Errorf("Release's error %v does not wrap the store's answer, ErrLeaseNotFound", err)
	}
	if again := h.Release(context.Background()); again != err {
		t.Errorf("second Release = %v, want the first's %v", again, err)
	}
	if herr := h.Err(); !errors.Is(herr, fencing.ErrLeaseLost) {
		t.Errorf("Err after the late release = %v, want ErrLeaseLost", herr)
	}
	if live, _ := other.CheckToken(context.Background(), "k", next.Token); !live {
		t.Errorf("the other client's lease %d is not live after the late release", next.Token)
	}
	t.Logf("Release: %v", err)
}
