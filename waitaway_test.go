package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// awayStore is a memory backend whose server can be taken away: while down,
// every request and subscription fails as a refused dial does, never sent.
type awayStore struct {
	*memorybackend.Backend
	down    atomic.Bool
	stall   atomic.Bool  // grants wait until their context ends
	refused atomic.Int32 // requests refused while down
	err     error        // what a request gets while down; default a refused dial
}

func newAwayStore() *awayStore { return &awayStore{Backend: memorybackend.New()} }

func (s *awayStore) away() error {
	if !s.down.Load() {
		return nil
	}
	s.refused.Add(1)
	if s.err != nil {
		return s.err
	}
	return fmt.Errorf("test: not sent: dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED)
}

func (s *awayStore) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if s.stall.Load() { // a client that waits for a connection
		<-ctx.Done()
		return backend.Lease{}, fmt.Errorf("test: grant: %w", ctx.Err())
	}
	if err := s.away(); err != nil {
		return backend.Lease{}, err
	}
	return s.Backend.Grant(ctx, req)
}

func (s *awayStore) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	if err := s.away(); err != nil {
		return nil, err
	}
	return s.Backend.NotifyFree(ctx, key)
}

// A Lock that starts while the store is down (its subscription and its
// grants refused) waits until the store is back and the holder releases.
func TestLockWaitsWhileStoreIsAway(t *testing.T) {
	s := newAwayStore()
	defer s.Close()
	c := fencing.New(s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.down.Store(true)
	type result struct {
		h   *fencing.Held
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := c.Lock(ctx, "k", time.Minute)
		done <- result{h, err}
	}()
	// Down until the waiter has been refused a few times.
	for s.refused.Load() < 3 {
		select {
		case r := <-done:
			t.Fatalf("Lock returned while the store was down: %v", r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.down.Store(false)
	if err := c.Release(ctx, "k", holder.ID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Lock after the store came back and the holder released: %v", r.err)
	}
	if r.h.Token() <= holder.Token {
		t.Errorf("token %d, want above the holder's %d", r.h.Token(), holder.Token)
	}
	r.h.Release(ctx)
}

// A wait that ends while the store is down returns an error wrapping both
// the wait's end and the store's last error, naming the key once.
func TestLockWaitEndsWhileStoreIsAway(t *testing.T) {
	for _, how := range []string{"context", "WithWaitTimeout"} {
		t.Run(how, func(t *testing.T) {
			s := newAwayStore()
			defer s.Close()
			c := fencing.New(s)
			s.down.Store(true)
			const wait = 300 * time.Millisecond
			start := time.Now()
			ctx := context.Background()
			var opts []fencing.LockOption
			if how == "context" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, wait)
				defer cancel()
			} else {
				opts = append(opts, fencing.WithWaitTimeout(wait))
			}
			_, err := c.Lock(ctx, "jobs/k", time.Minute, opts...)
			took := time.Since(start)
			if took < wait {
				t.Fatalf("Lock gave up after %v, before its wait of %v ended: %v", took, wait, err)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fencing.ErrLeaseHeld) {
				t.Fatalf("Lock: %v; want an error wrapping context.DeadlineExceeded and the refused dial", err)
			}
			if n := strings.Count(err.Error(), "jobs/k"); n != 1 {
				t.Errorf("Lock: %q names the key %d times, want once", err, n)
			}
			if how == "WithWaitTimeout" && !strings.Contains(err.Error(), "gave up after waiting 300ms") {
				t.Errorf("Lock: %q does not say how long it waited", err)
			}
			if s.refused.Load() > 20 {
				t.Errorf("%d requests in %v to a store that was down: the waiter does not back off", s.refused.Load(), took)
			}
		})
	}
}

// A wait that ends during a grant the store has left unanswered for a
// second or more (a client that waits for a connection, as etcd's does,
// with no request timeout to cut it off first) ends as a wait on a store
// that is away, not on a held key.
func TestLockWaitEndsDuringUnansweredGrant(t *testing.T) {
	s := newAwayStore()
	defer s.Close()
	c := fencing.New(s, fencing.WithRequestTimeout(0))
	ctx := context.Background()
	if _, err := s.Backend.Grant(ctx, backend.Request{Key: "k", LeaseID: "holder", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s.stall.Store(true)
	_, err := c.Lock(ctx, "k", time.Minute, fencing.WithWaitTimeout(1500*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencing.ErrNoAnswer) || errors.Is(err, fencing.ErrLeaseHeld) ||
		!strings.Contains(err.Error(), "before the wait ended") {
		t.Fatalf("Lock whose wait ended during a grant unanswered for 1.5s: %v; want context.DeadlineExceeded and ErrNoAnswer, not ErrLeaseHeld", err)
	}
}

// An error that no wait cures ends the wait at once: a closed backend.
func TestLockDefiniteErrorEndsWait(t *testing.T) {
	s := newAwayStore()
	defer s.Close()
	s.err = fmt.Errorf("test: %w", backend.ErrClosed)
	s.down.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := fencing.New(s).Lock(ctx, "k", time.Minute)
	if !errors.Is(err, backend.ErrClosed) || time.Since(start) > 30*time.Second {
		t.Fatalf("Lock on a closed backend: %v after %v, want ErrClosed at once", err, time.Since(start))
	}
}

// IsTransient tells the store's absence from what no wait cures.
func TestIsTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("not sent: %w", syscall.ECONNREFUSED), true},
		{fmt.Errorf("%w: read: %w", fencing.ErrOutcomeUnknown, syscall.ECONNRESET), true},
		{fmt.Errorf("%w: %w", fencing.ErrNoAnswer, context.DeadlineExceeded), true},
		{context.Canceled, false},
		{fmt.Errorf("grant: %w", context.DeadlineExceeded), false},
		{fencing.ErrLeaseHeld, false},
		{fencing.ErrLeaseNotFound, false},
		{fencing.ErrInvalidKey, false},
		{fencing.ErrInvalidOption, false},
		{backend.ErrClosed, false},
		{backend.ErrAuthRefused, false},
		{backend.ErrPermissionDenied, false},
		{errors.ErrUnsupported, false},
	} {
		if got := fencing.IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
