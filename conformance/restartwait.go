package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// RunRestartWait checks that a waiter waits through a crash of the server:
// a store that is gone for a while is one more reason to wait, not a
// reason to give up. Its cases, on r's server, with one backend from
// before the crash to the end (r's server must be back at the same address
// after Start, so that the backend reaches it again):
//
//   - LockWaitTimeoutWhileDown: a Lock (with WithWaitTimeout) that starts
//     while the server is down waits until its wait timeout ends, and its
//     error wraps both context.DeadlineExceeded and the store's last error,
//     which fencing.IsTransient;
//   - LockWaitsThroughRestart: Locks waiting for held keys (and a LockMany,
//     and a Lock WithFIFO, where the backend can) when the server is
//     killed keep waiting while it is down, and get their keys once it is
//     back and the holder has released them.
func RunRestartWait(t *testing.T, r Restarter) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := r.NewBackend(ctx, t)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	// A request bound below the waits, so that a server whose client
	// waits for a connection (etcd's) fails each attempt as no answer.
	c := fencing.New(b, fencing.WithRequestTimeout(time.Second))
	ttl := max(r.Traits().MinTTL, time.Second)
	down := false
	start := func(t *testing.T) {
		if down {
			r.Start(t)
			down = false
		}
	}
	defer start(t)
	kill := func(t *testing.T) {
		r.Kill(t)
		down = true
	}

	t.Run("LockWaitTimeoutWhileDown", func(t *testing.T) {
		defer start(t)
		var holder fencing.Lease
		err := afterRestart(ctx, func() (err error) {
			holder, err = c.Grant(ctx, "wait-down", 10*time.Minute)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		kill(t)
		const wait = 3 * time.Second
		began := time.Now()
		h, err := c.Lock(ctx, "wait-down", ttl, fencing.WithWaitTimeout(wait))
		took := time.Since(began)
		if err == nil {
			h.Release(ctx)
			t.Fatal("Lock got a key while the server was down")
		}
		if took < wait {
			t.Fatalf("Lock gave up after %v with the server down, before its wait timeout of %v: %v", took.Round(time.Millisecond), wait, err)
		}
		last := storeCause(err)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, fencing.ErrLeaseHeld) || last == nil || !fencing.IsTransient(last) {
			t.Fatalf("Lock past its wait timeout with the server down: %v; want an error wrapping context.DeadlineExceeded and the store's last error (transient), not ErrLeaseHeld", err)
		}
		t.Logf("after %v: %v", took.Round(time.Millisecond), err)
		start(t)
		if err := releaseAfterRestart(ctx, c, "wait-down", holder.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LockWaitsThroughRestart", func(t *testing.T) {
		defer start(t)
		type waiter struct {
			name string
			keys []string
			lock func(ctx context.Context) (func(context.Context) error, error)
		}
		waiters := []waiter{{name: "Lock", keys: []string{"wait-one"}, lock: func(ctx context.Context) (func(context.Context) error, error) {
			h, err := c.Lock(ctx, "wait-one", ttl, fencing.WithPollInterval(100*time.Millisecond))
			if err != nil {
				return nil, err
			}
			return h.Release, nil
		}}}
		if _, ok := b.(backend.MultiGranter); ok {
			waiters = append(waiters, waiter{name: "LockMany", keys: []string{"wait-many-a", "wait-many-b"}, lock: func(ctx context.Context) (func(context.Context) error, error) {
				m, err := c.LockMany(ctx, []string{"wait-many-a", "wait-many-b"}, ttl, fencing.WithPollInterval(100*time.Millisecond))
				if err != nil {
					return nil, err
				}
				return m.Release, nil
			}})
		}
		if _, ok := b.(backend.Queuer); ok {
			waiters = append(waiters, waiter{name: "Lock WithFIFO", keys: []string{"wait-fifo"}, lock: func(ctx context.Context) (func(context.Context) error, error) {
				h, err := c.Lock(ctx, "wait-fifo", ttl, fencing.WithFIFO(), fencing.WithPollInterval(100*time.Millisecond))
				if err != nil {
					return nil, err
				}
				return h.Release, nil
			}})
		}
		type holding struct{ key, id string }
		var held []holding
		for _, w := range waiters {
			var l fencing.Lease
			err := afterRestart(ctx, func() (err error) {
				l, err = c.Grant(ctx, w.keys[0], 10*time.Minute)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, holding{w.keys[0], l.ID})
		}
		type result struct {
			name    string
			release func(context.Context) error
			err     error
		}
		results := make(chan result, len(waiters))
		for _, w := range waiters {
			go func() {
				release, err := w.lock(ctx)
				results <- result{w.name, release, err}
			}()
		}
		// Let the waiters subscribe and find their keys held.
		if err := Sleep(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		kill(t)
		// Down long enough for every waiter to try (it polls every 100ms)
		// and be refused by the dead server.
		select {
		case res := <-results:
			if res.release != nil {
				res.release(ctx)
			}
			t.Fatalf("%s returned while the server was down: %v", res.name, res.err)
		case <-time.After(3 * time.Second):
		}
		start(t)
		for _, h := range held {
			if err := releaseAfterRestart(ctx, c, h.key, h.id); err != nil {
				t.Fatal(err)
			}
		}
		for range waiters {
			res := <-results
			if res.err != nil {
				t.Errorf("%s after the restart and the holder's release: %v, want the key", res.name, res.err)
				continue
			}
			switch err := res.release(ctx); {
			case errors.Is(err, fencing.ErrLeaseLost):
				// Its renewals came late (a slow host, a TTL of a
				// second): the wait this test is about ended well.
				t.Logf("%s's lease ended before its Release (a slow host): %v", res.name, err)
			case err != nil:
				t.Errorf("%s's Release: %v", res.name, err)
			}
		}
	})
}

// releaseAfterRestart releases the lease id on key (see afterRestart). A
// release that finds no lease after an attempt whose outcome was unknown
// is done: that attempt released it.
func releaseAfterRestart(ctx context.Context, c *fencing.Coordinator, key, id string) error {
	unknown := false
	return afterRestart(ctx, func() error {
		err := c.Release(ctx, key, id)
		if unknown && errors.Is(err, fencing.ErrLeaseNotFound) {
			return nil
		}
		unknown = unknown || errors.Is(err, fencing.ErrOutcomeUnknown)
		return err
	})
}

// afterRestart runs call, again while it fails as a server that was just
// started may, before it answers (fencing.IsTransient).
func afterRestart(ctx context.Context, call func() error) error {
	for {
		err := call()
		if err == nil || !fencing.IsTransient(err) || ctx.Err() != nil {
			return err
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// storeCause returns the error that err, a wait's error, wraps besides
// the context's, or nil.
func storeCause(err error) error {
	var multi interface{ Unwrap() []error }
	if !errors.As(err, &multi) {
		return nil
	}
	for _, e := range multi.Unwrap() {
		if e != context.DeadlineExceeded && e != context.Canceled {
			return e
		}
	}
	return nil
}
