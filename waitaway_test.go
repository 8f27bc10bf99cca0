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

// stallsAfterFirst is a memory backend that answers the first grant, and
// leaves every later one unanswered until its context ends (a store that
// went away while the waiter waited for its next poll).
type stallsAfterFirst struct {
	*memorybackend.Backend
	grants atomic.Int32
}

func (s *stallsAfterFirst) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if s.grants.Add(1) > 1 {
		<-ctx.Done()
		return backend.Lease{}, fmt.Errorf("test: grant: %w", ctx.Err())
	}
	return s.Backend.Grant(ctx, req)
}

// A wait whose last attempt, sent shortly before the wait ended, got no
// answer while earlier ones were answered at once ends as a wait on a
// store that is away, though that attempt was in flight for less than a
// second: the judgment is against the answers the wait has seen.
func TestLockWaitEndsDuringShortUnansweredGrant(t *testing.T) {
	s := &stallsAfterFirst{Backend: memorybackend.New()}
	defer s.Close()
	c := fencing.New(s, fencing.WithRequestTimeout(0))
	ctx := context.Background()
	if _, err := s.Backend.Grant(ctx, backend.Request{Key: "k", LeaseID: "holder", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.Lock(ctx, "k", time.Minute, fencing.WithWaitTimeout(900*time.Millisecond), fencing.WithPollInterval(50*time.Millisecond))
	if !errors.Is(err, fencing.ErrNoAnswer) || errors.Is(err, fencing.ErrLeaseHeld) || s.grants.Load() != 2 {
		t.Fatalf("Lock whose wait ended %v after it began, during its second grant (the first answered at once): %v after %d grants; want ErrNoAnswer, not ErrLeaseHeld",
			time.Since(start).Round(time.Millisecond), err, s.grants.Load())
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

// queuedGrants is a memory backend whose grants can be held at a gate, as
// a client holds a request that waits for its connection while the server
// is away and sends it once the server is back, and whose renewals can be
// held until the lease they renew has ended.
type queuedGrants struct {
	*memorybackend.Backend
	gate      chan struct{} // grants wait until it is closed
	entered   chan time.Time
	lateRenew atomic.Bool // the next renewal waits for its lease's end
}

func (s *queuedGrants) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	s.entered <- time.Now()
	<-s.gate
	return s.Backend.Grant(ctx, req)
}

func (s *queuedGrants) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if s.lateRenew.CompareAndSwap(true, false) {
		l, err := s.Inspect(ctx, req.Key)
		if err != nil {
			return backend.Lease{}, err
		}
		time.Sleep(l.Remaining + 10*time.Millisecond) // on the store's own clock: past the lease's end
	}
	return s.Backend.Renew(ctx, req)
}

// A waiter's grant that was sent long before it took effect (it waited for
// the store to come back) has its Deadline counted from the send: Lock
// renews it before returning it, so the holder gets its whole TTL, counted
// from after the grant took effect. A lease that ended before that renewal
// is not returned: the wait goes on for a new one.
func TestLockRenewsALateGrant(t *testing.T) {
	for _, ended := range []bool{false, true} {
		t.Run(fmt.Sprintf("ended=%v", ended), func(t *testing.T) {
			s := &queuedGrants{Backend: memorybackend.New(), gate: make(chan struct{}), entered: make(chan time.Time, 16)}
			defer s.Close()
			s.lateRenew.Store(ended)
			c := fencing.New(s)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const ttl = 600 * time.Millisecond
			type result struct {
				h   *fencing.Held
				err error
			}
			done := make(chan result, 1)
			go func() {
				h, err := c.Lock(ctx, "k", ttl)
				done <- result{h, err}
			}()
			sent := <-s.entered
			// Past the point where the lease's first renewal is due (a
			// third of the TTL after the send), counted from the send.
			time.Sleep(time.Until(sent.Add(ttl * 2 / 3)))
			opened := time.Now()
			close(s.gate)
			r := <-done
			if r.err != nil {
				t.Fatalf("Lock: %v", r.err)
			}
			defer r.h.Release(ctx)
			lease := r.h.Lease()
			if lease.Deadline.Before(opened.Add(ttl)) {
				t.Errorf("Lock returned a lease with %v of its %v left, its Deadline counted from the grant sent %v before it took effect",
					time.Until(lease.Deadline).Round(time.Millisecond), ttl, opened.Sub(sent).Round(time.Millisecond))
			}
			if first := uint64(1); ended != (lease.Token > first) {
				t.Errorf("token %d: the first grant's lease ended before its renewal = %v, want a new lease exactly then", lease.Token, ended)
			}
			if ok, err := c.CheckToken(ctx, "k", lease.Token); err != nil || !ok {
				t.Errorf("CheckToken(%d) = %v, %v; want the held lease's token current", lease.Token, ok, err)
			}
		})
	}
}
