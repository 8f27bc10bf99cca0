package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// stalled is a backend whose server never answers: every request waits
// for its context and then fails as a network client does, with the
// outcome unknown for a grant, renewal or release that was sent, and the
// context's error for the rest. It records the deadline each attempt saw.
type stalled struct {
	sent         bool // mutating requests count as sent (their outcome is unknown)
	freeNotifies bool // NotifyFree answers at once

	mu        sync.Mutex
	deadlines []time.Duration // each attempt's time left, from its start (0: already past); -1: no deadline
	mutating  int             // attempts of mutating requests (Grant, Renew, Release)
}

func (s *stalled) wait(ctx context.Context, mutating bool) error {
	s.mu.Lock()
	if d, ok := ctx.Deadline(); ok {
		// On a loaded host the goroutine can start an attempt after its
		// deadline has passed: still bounded, recorded as 0 so that -1
		// means only "no deadline".
		s.deadlines = append(s.deadlines, max(time.Until(d), 0))
	} else {
		s.deadlines = append(s.deadlines, -1)
	}
	if mutating {
		s.mutating++
	}
	s.mu.Unlock()
	<-ctx.Done()
	if mutating && s.sent {
		return fmt.Errorf("%w: read: %w", backend.ErrOutcomeUnknown, ctx.Err())
	}
	return fmt.Errorf("dial: %w", ctx.Err())
}

// mutations is the number of mutating requests sent so far.
func (s *stalled) mutations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mutating
}

func (s *stalled) attempts() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.deadlines...)
}

func (s *stalled) Grant(ctx context.Context, _ backend.Request) (backend.Lease, error) {
	return backend.Lease{}, s.wait(ctx, true)
}
func (s *stalled) Renew(ctx context.Context, _ backend.Request) (backend.Lease, error) {
	return backend.Lease{}, s.wait(ctx, true)
}
func (s *stalled) Release(ctx context.Context, _, _ string) error { return s.wait(ctx, true) }
func (s *stalled) Token(ctx context.Context, _ string) (uint64, bool, error) {
	return 0, false, s.wait(ctx, false)
}
func (s *stalled) Inspect(ctx context.Context, _ string) (backend.KeyState, error) {
	return backend.KeyState{}, s.wait(ctx, false)
}
func (s *stalled) ForceRelease(ctx context.Context, _ string) (bool, error) {
	return false, s.wait(ctx, false)
}
func (s *stalled) List(ctx context.Context, _, _ string, _ int) ([]backend.KeyInfo, string, error) {
	return nil, "", s.wait(ctx, false)
}
func (s *stalled) NotifyFree(ctx context.Context, _ string) (backend.Subscription, error) {
	if s.freeNotifies {
		return nopSub{}, nil
	}
	return nil, s.wait(ctx, false)
}

type nopSub struct{}

func (nopSub) Freed() <-chan struct{} { return nil }
func (nopSub) Close() error           { return nil }
func (s *stalled) Close() error       { return nil }

// within runs f and fails unless it returns within bound.
func within(t *testing.T, what string, bound time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		t.Fatalf("%s with context.Background() still blocked after %v", what, bound)
	}
	return nil
}

// Every request with context.Background() to a server that never answers
// returns, each attempt bounded by the request timeout, and says so (Lock,
// which waits through it, when its WithWaitTimeout ends).
func TestRequestTimeoutBoundsEveryRequest(t *testing.T) {
	const d = 100 * time.Millisecond
	ctx := context.Background()
	for _, sent := range []bool{false, true} {
		t.Run(fmt.Sprintf("sent=%v", sent), func(t *testing.T) {
			s := &stalled{sent: sent, freeNotifies: true}
			c := fencing.New(s, fencing.WithRequestTimeout(d), fencing.WithOutcomeRetries(1))
			sn := &stalled{sent: sent}
			stalledNotify := fencing.New(sn, fencing.WithRequestTimeout(d))
			calls := []struct {
				name string
				f    func() error
			}{
				{"Grant", func() error { _, err := c.Grant(ctx, "k", time.Minute); return err }},
				{"Renew", func() error { _, err := c.Renew(ctx, "k", "id", time.Minute); return err }},
				{"Release", func() error { return c.Release(ctx, "k", "id") }},
				{"Token", func() error { _, _, err := c.Token(ctx, "k"); return err }},
				{"Inspect", func() error { _, err := c.Inspect(ctx, "k"); return err }},
				{"ForceRelease", func() error { _, err := c.ForceRelease(ctx, "k"); return err }},
				{"List", func() error { _, _, err := c.List(ctx, "", "", 0); return err }},
				{"Hold", func() error { _, err := c.Hold(ctx, "k", time.Minute); return err }},
				// Lock waits through a server that does not answer, until
				// its wait ends: with context.Background(), WithWaitTimeout.
				{"Lock", func() error {
					_, err := c.Lock(ctx, "k", time.Minute, fencing.WithWaitTimeout(5*d))
					return err
				}},
				{"Lock's subscription", func() error {
					_, err := stalledNotify.Lock(ctx, "k", time.Minute, fencing.WithWaitTimeout(5*d))
					return err
				}},
				{"Do", func() error {
					return c.Do(ctx, "k", time.Minute, func(context.Context, fencing.Lease) error { return nil })
				}},
			}
			for _, call := range calls {
				store := s
				if call.name == "Lock's subscription" {
					store = sn
				}
				before := store.mutations()
				err := within(t, call.name, 20*d, call.f)
				// A Lock waits first for its subscription, which polls when
				// it fails: on a loaded host its wait can end before its
				// first grant is sent, and then nothing of it was sent.
				sentAny := store.mutations() > before
				if !errors.Is(err, fencing.ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v, want ErrNoAnswer", call.name, err)
					continue
				}
				if !strings.Contains(err.Error(), "no answer within the request timeout of 100ms") {
					t.Errorf("%s: %q does not say the server did not answer within the bound", call.name, err)
				}
				mutating := call.name == "Grant" || call.name == "Renew" || call.name == "Release" || call.name == "Hold" || strings.HasPrefix(call.name, "Lock") || call.name == "Do"
				if unknown := errors.Is(err, fencing.ErrOutcomeUnknown); unknown != (sent && mutating && sentAny) {
					t.Errorf("%s: %v: outcome unknown = %v, want %v (%v mutating requests sent)", call.name, err, unknown, sent && mutating && sentAny, sentAny)
				}
				var oe *fencing.OutcomeError
				if isGrant := call.name != "Renew" && call.name != "Release" && mutating; sent && isGrant && sentAny && !errors.As(err, &oe) {
					t.Errorf("%s: %v, want an *OutcomeError", call.name, err)
				}
			}
			// Each attempt, resends included, had a bound of its own.
			for i, a := range s.attempts() {
				if a < 0 || a > d {
					t.Fatalf("attempt %d had %v left, want at most the request timeout %v", i, a, d)
				}
			}
		})
	}
}

// The default bound is DefaultRequestTimeout, 0 turns it off, a caller's
// shorter deadline is left as it is, and an in-process backend is never
// bounded.
func TestRequestTimeoutDefaults(t *testing.T) {
	if fencing.DefaultRequestTimeout != 10*time.Second {
		t.Fatalf("DefaultRequestTimeout = %v, want 10s", fencing.DefaultRequestTimeout)
	}
	seen := func(c *fencing.Coordinator, s *stalled, ctx context.Context) time.Duration {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		c.Token(tctx, "k")
		a := s.attempts()
		return a[len(a)-1]
	}
	// The bound is seen by the backend as its context's deadline: probe it
	// through a context the test cancels itself.
	s := &stalled{}
	c := fencing.New(s)
	ctx := context.Background()
	c.Token(cancelSoon(ctx), "k")
	if a := s.attempts()[0]; a < 9*time.Second || a > 10*time.Second {
		t.Fatalf("default bound: the attempt had %v left, want about 10s", a)
	}
	s = &stalled{}
	c = fencing.New(s, fencing.WithRequestTimeout(0))
	c.Token(cancelSoon(ctx), "k")
	if a := s.attempts()[0]; a != -1 {
		t.Fatalf("WithRequestTimeout(0): the attempt had a deadline %v away, want none", a)
	}
	s = &stalled{}
	c = fencing.New(s, fencing.WithRequestTimeout(time.Hour))
	if a := seen(c, s, ctx); a > 50*time.Millisecond {
		t.Fatalf("a caller's 50ms deadline became %v", a)
	}
	ip := &inProcess{stalled: &stalled{}}
	c = fencing.New(ip)
	c.Token(cancelSoon(ctx), "k")
	if a := ip.attempts()[0]; a != -1 {
		t.Fatalf("an in-process backend got a deadline %v away, want none", a)
	}
}

// inProcess is a stalled backend that says it is in-process.
type inProcess struct{ *stalled }

func (inProcess) InProcess() {}

var _ backend.InProcess = inProcess{}

// cancelSoon returns ctx canceled 20ms from now, with no deadline.
func cancelSoon(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	return ctx
}

// A held lease's renewals are bounded too: a renewal that gets no answer is
// cut off by the request timeout, and the next is tried while the Deadline
// allows.
func TestRequestTimeoutBoundsRenewals(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	f := &stallRenewals{Backend: mem}
	c := fencing.New(f, fencing.WithRequestTimeout(50*time.Millisecond))
	h, err := c.Hold(context.Background(), "k", 2*time.Second, fencing.WithRenewInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	time.Sleep(600 * time.Millisecond)
	if n := f.renewals(); n < 3 {
		t.Fatalf("%d renewal attempts in 600ms with each cut off at 50ms, want several", n)
	}
	if h.Err() != nil {
		t.Fatalf("lost before its Deadline: %v", h.Err())
	}
}

// stallRenewals lets grants through and stalls every renewal until its
// context ends.
type stallRenewals struct {
	backend.Backend
	mu sync.Mutex
	n  int
}

func (s *stallRenewals) Renew(ctx context.Context, _ backend.Request) (backend.Lease, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	<-ctx.Done()
	return backend.Lease{}, ctx.Err()
}

func (s *stallRenewals) renewals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// slowUnknown answers every grant after delay, ignoring its context, with
// the outcome unknown (a reply lost after the client's own read timeout).
type slowUnknown struct {
	backend.Backend
	delay time.Duration
	mu    sync.Mutex
	n     int
}

func (s *slowUnknown) Grant(ctx context.Context, _ backend.Request) (backend.Lease, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	time.Sleep(s.delay)
	return backend.Lease{}, fmt.Errorf("%w: read: i/o timeout", backend.ErrOutcomeUnknown)
}

// Resends of an unknown outcome stop once the request timeout has passed
// since the first attempt: a server that does not answer costs a call about
// one request timeout, not one per attempt.
func TestRequestTimeoutBoundsResends(t *testing.T) {
	const d = 200 * time.Millisecond
	mem := memorybackend.New()
	defer mem.Close()
	s := &slowUnknown{Backend: mem, delay: 3 * d / 4}
	c := fencing.New(s, fencing.WithRequestTimeout(d), fencing.WithOutcomeRetries(10))
	start := time.Now()
	_, err := c.Grant(context.Background(), "k", time.Minute)
	took := time.Since(start)
	if !errors.Is(err, fencing.ErrOutcomeUnknown) {
		t.Fatalf("Grant: %v, want ErrOutcomeUnknown", err)
	}
	s.mu.Lock()
	n := s.n
	s.mu.Unlock()
	// 150ms per attempt: the resend at 150ms is the last (300ms >= 200ms).
	if n < 1 || n > 2 {
		t.Fatalf("%d attempts in %v with a 200ms request timeout and 150ms per attempt, want at most 2", n, took)
	}
}
