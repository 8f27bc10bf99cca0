package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// WithWaitTimeout bounds Lock's wait: a waiter on a held key gives up at
// the bound with ErrLeaseHeld and says how long it waited.
func TestLockWaitTimeoutGivesUp(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	ctx := context.Background()
	if _, err := c.Grant(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	const wait = 200 * time.Millisecond
	start := time.Now()
	h, err := c.Lock(ctx, "k", time.Second, fencing.WithWaitTimeout(wait))
	took := time.Since(start)
	if err == nil {
		h.Release(ctx)
		t.Fatal("Lock got a key held for a minute")
	}
	if !errors.Is(err, fencing.ErrLeaseHeld) || !strings.Contains(err.Error(), "gave up after waiting 200ms") {
		t.Fatalf("Lock past its wait timeout: %v, want ErrLeaseHeld saying how long it waited", err)
	}
	if strings.Count(err.Error(), `"k"`) != 1 {
		t.Fatalf("error %q names the key more than once", err)
	}
	if took < wait || took > wait+time.Second {
		t.Fatalf("Lock gave up after %v, want %v", took, wait)
	}
}

// The wait bound does not bound the lease: a Lock that gets the key within
// it holds the key long past it.
func TestLockWaitTimeoutDoesNotEndTheLease(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	ctx := context.Background()
	const wait = 100 * time.Millisecond
	h, err := c.Lock(ctx, "k", time.Second, fencing.WithWaitTimeout(wait))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	select {
	case <-h.Done():
		t.Fatalf("the lease ended %v: %v", context.Cause(h.Context()), h.Err())
	case <-time.After(5 * wait):
	}
	if ok, err := c.CheckToken(ctx, "k", h.Token()); !ok || err != nil {
		t.Fatalf("token checks %v, %v after 5 wait timeouts, want the lease still live", ok, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A waiter that gets the key after waiting, within the bound, keeps it too.
func TestLockWaitTimeoutAfterWaiting(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	ctx := context.Background()
	l, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { c.Release(ctx, "k", l.ID) })
	const wait = 300 * time.Millisecond
	h, err := c.Lock(ctx, "k", 2*time.Second, fencing.WithWaitTimeout(wait))
	if err != nil {
		t.Fatalf("Lock within its wait timeout: %v", err)
	}
	defer h.Release(ctx)
	time.Sleep(2 * wait)
	if err := h.Err(); err != nil || h.Context().Err() != nil {
		t.Fatalf("the lease ended past the wait timeout: %v", err)
	}
}

func TestLockWaitTimeoutMustBePositive(t *testing.T) {
	c := fencing.New(memorybackend.New())
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := c.Lock(context.Background(), "k", time.Second, fencing.WithWaitTimeout(d)); !errors.Is(err, fencing.ErrInvalidOption) {
			t.Errorf("WithWaitTimeout(%v): %v, want ErrInvalidOption", d, err)
		}
	}
}
