package fencing_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// runningClock is a fake clock that also runs with real time: a test jumps
// it past a lease's TTL at once, and then a lock delay passes in real time,
// as a waiter's timers do.
type runningClock struct {
	fake  *memorybackend.FakeClock
	start time.Time
}

func newRunningClock() *runningClock {
	return &runningClock{fake: memorybackend.NewFakeClock(epoch), start: time.Now()}
}

func (c *runningClock) Now() time.Time { return c.fake.Now().Add(time.Since(c.start)) }

// grantLog is the memory backend, logging each grant: when the backend's
// clock read it and what it answered.
type grantLog struct {
	*memorybackend.Backend
	clock *runningClock
	mu    sync.Mutex
	log   []loggedGrant
}

type loggedGrant struct {
	at  time.Time // on the backend's clock, just after the answer
	err error
}

func (g *grantLog) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	l, err := g.Backend.Grant(ctx, req)
	g.mu.Lock()
	g.log = append(g.log, loggedGrant{at: g.clock.Now(), err: err})
	g.mu.Unlock()
	return l, err
}

func (g *grantLog) grants() []loggedGrant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]loggedGrant(nil), g.log...)
}

// A waiter refused during a lock delay sleeps out exactly the delay's time
// left and tries once, however short its poll interval: it gets the key
// within a small bound after expiry + delay, with at most one grant attempt
// during the delay. The delay starts before the waiter arrives (the clock
// jumps past the lease's end) or while it waits (the lease, live when it
// arrived, expires in real time; until then it polls, as it must for a
// holder that may release at any moment).
func TestLockSleepsOutLockDelay(t *testing.T) {
	const delay = 300 * time.Millisecond
	// The machine is shared and busy: a timer may fire late, and the bound
	// allows for it; a waiter that polled would send some 30 attempts.
	const bound = 150 * time.Millisecond
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		jump bool
	}{
		{"ArrivesInTheDelay", time.Minute, true},
		{"WaitsIntoTheDelay", 100 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newRunningClock()
			g := &grantLog{Backend: memorybackend.New(memorybackend.WithClock(clock)), clock: clock}
			defer g.Close()
			c := fencing.New(g, fencing.WithDefaultLockDelay(delay))
			crashed, err := c.Grant(ctx, "k", tc.ttl, 0) // a holder that will never renew nor release
			if err != nil {
				t.Fatal(err)
			}
			if tc.jump {
				clock.fake.Advance(tc.ttl)
			}
			h, err := c.Lock(ctx, "k", time.Minute, fencing.WithPollInterval(fencing.MinPollInterval))
			if err != nil {
				t.Fatalf("Lock: %v", err)
			}
			defer h.Release(ctx)
			opened := crashed.ExpiresAt.Add(delay)
			late := clock.Now().Sub(opened)
			if late < 0 || late > bound {
				t.Errorf("Lock returned %v after the lock delay ended, want within [0, %v]", late, bound)
			}
			grants := g.grants()
			t.Logf("Lock returned %v after the %v lock delay ended, after %d grant attempts", late, delay, len(grants)-1)
			var during int
			for _, gr := range grants[1 : len(grants)-1] { // the crashed holder's grant and the waiter's last
				var held *backend.HeldError
				if !errors.As(gr.err, &held) {
					t.Fatalf("a refused attempt: %v, want a *backend.HeldError", gr.err)
				}
				if !gr.at.Before(crashed.ExpiresAt) {
					during++
					if !held.Delayed {
						t.Errorf("an attempt after the lease expired: %v, want HeldError.Delayed", gr.err)
					}
				}
			}
			if during != 1 {
				t.Errorf("%d grant attempts refused during the lock delay, want exactly 1 (then a sleep of its time left)", during)
			}
			if last := grants[len(grants)-1]; last.err != nil || last.at.Before(opened) {
				t.Errorf("the waiter's grant: %v at %v, want success at or after %v", last.err, last.at, opened)
			}
			if h.Token() != crashed.Token+1 {
				t.Errorf("waiter's token %d, want %d", h.Token(), crashed.Token+1)
			}
		})
	}
}

// WithLockDelay and WithDefaultLockDelay reach the grant of Grant, Hold,
// Lock and Do; a call's own delay wins over the default, zero included.
func TestLockDelayOptions(t *testing.T) {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem, fencing.WithDefaultLockDelay(5*time.Second))
	wantDelay := func(what, key string, want time.Duration) {
		t.Helper()
		st, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Live || st.LockDelay != want {
			t.Errorf("%s: Inspect = %+v, want live with LockDelay %v", what, st, want)
		}
	}
	lease, err := c.Grant(ctx, "grant", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wantDelay("Grant with the default", "grant", 5*time.Second)
	c.Release(ctx, "grant", lease.ID)
	for _, tc := range []struct {
		name string
		opts []fencing.HoldOption
		want time.Duration
	}{
		{"default", nil, 5 * time.Second},
		{"WithLockDelay", []fencing.HoldOption{fencing.WithLockDelay(backend.MaxLockDelay)}, backend.MaxLockDelay},
		{"WithLockDelay(0)", []fencing.HoldOption{fencing.WithLockDelay(0)}, 0},
	} {
		h, err := c.Hold(ctx, "hold", time.Minute, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		wantDelay("Hold, "+tc.name, "hold", tc.want)
		h.Release(ctx)
		h, err = c.Lock(ctx, "lock", time.Minute, lockOptions(tc.opts)...)
		if err != nil {
			t.Fatal(err)
		}
		wantDelay("Lock, "+tc.name, "lock", tc.want)
		h.Release(ctx)
		err = c.Do(ctx, "do", time.Minute, func(context.Context, fencing.Lease) error {
			wantDelay("Do, "+tc.name, "do", tc.want)
			return nil
		}, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A bad WithLockDelay is refused before any request, with ErrInvalidOption:
// the key is never leased. (A bad WithDefaultLockDelay: see
// TestBadCoordinatorOption.)
func TestLockDelayBadValues(t *testing.T) {
	ctx := context.Background()
	clock := newRunningClock()
	g := &grantLog{Backend: memorybackend.New(memorybackend.WithClock(clock)), clock: clock}
	defer g.Close()
	good := fencing.New(g)
	for _, d := range []time.Duration{-time.Nanosecond, backend.MaxLockDelay + time.Nanosecond} {
		sent := len(g.grants())
		opt := fencing.WithLockDelay(d)
		_, err := good.Hold(ctx, "k", time.Minute, opt)
		wantBoth(t, "Hold with WithLockDelay("+d.String()+")", err, fencing.ErrInvalidOption, fencing.ErrInvalidLockDelay)
		_, err = good.Lock(ctx, "k", time.Minute, opt)
		wantBoth(t, "Lock with WithLockDelay("+d.String()+")", err, fencing.ErrInvalidOption, fencing.ErrInvalidLockDelay)
		err = good.Do(ctx, "k", time.Minute, func(context.Context, fencing.Lease) error { return nil }, opt)
		wantBoth(t, "Do with WithLockDelay("+d.String()+")", err, fencing.ErrInvalidOption, fencing.ErrInvalidLockDelay)
		if n := len(g.grants()) - sent; n != 0 {
			t.Fatalf("%d grants sent with a bad WithLockDelay, want none", n)
		}
		if st, err := good.Inspect(ctx, "k"); err != nil || st != (fencing.KeyState{}) {
			t.Fatalf("Inspect after calls with bad lock delays = %+v, %v; want the zero KeyState (never leased)", st, err)
		}
	}
}

func wantBoth(t *testing.T, what string, err, a, b error) {
	t.Helper()
	if !errors.Is(err, a) || !errors.Is(err, b) {
		t.Fatalf("%s: %v, want an error wrapping %v and %v", what, err, a, b)
	}
}
