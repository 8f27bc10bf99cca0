package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/heldtest"
	"github.com/fencing-go/fencing/memorybackend"
)

// Edges of the held lease and of Lock that the happy paths of held_test.go
// and the conformance suite do not reach: renewals that fail after some
// succeeded, answers that come after the loss, contexts with deadlines of
// their own, and grants whose outcome stays unknown while Lock gives up.

// waitFor polls cond every millisecond until it holds, failing after bound.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(bound); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, bound)
		}
	}
}

// endsAtDeadline is heldtest.EndsAtDeadline with the tolerance these
// tests use: 50ms after a timer for the Deadline fired.
func endsAtDeadline(t *testing.T, h *fencing.Held, deadline time.Time, bound time.Duration) {
	t.Helper()
	if d := h.Lease().Deadline; !d.Equal(deadline) {
		t.Fatalf("the lease's Deadline is %v, want %v", d, deadline)
	}
	heldtest.EndsAtDeadline(t, h, bound, 50*time.Millisecond)
}

// Renewals that succeed and then hang: the context ends at the Deadline of
// the LAST confirmed renewal, so the expiry timer is re-armed by each one.
func TestHoldEndsAtLatestDeadlineWhenALaterRenewalHangs(t *testing.T) {
	f := newFaulty(t)
	c := fencing.New(f)
	const ttl = 600 * time.Millisecond // renewals every 50ms: only a long stall loses it
	h, err := c.Hold(context.Background(), "k", ttl, fencing.WithRenewInterval(50*time.Millisecond))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	first := h.Lease().Deadline
	// Past the first Deadline with renewals confirmed: the expiry timer has
	// fired once already and found the lease renewed.
	waitFor(t, 10*time.Second, "renewed past the first Deadline", func() bool {
		return time.Now().After(first.Add(20*time.Millisecond)) || h.Err() != nil
	})
	if err := h.Err(); err != nil {
		t.Fatalf("lost before the renewals were made to hang: %v", err)
	}
	hang := make(chan struct{})
	f.set(func(f *faulty) { f.hang = hang })
	defer close(hang)
	// A renewal started before the hang may still be confirmed. The renewer
	// sends one renewal at a time, so once one was sent after the hang, the
	// one before it has been answered: Lease() is final.
	f.mu.Lock()
	n := len(f.renewSent)
	f.mu.Unlock()
	waitFor(t, 10*time.Second, "a renewal sent after the hang", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.renewSent) > n
	})
	endsAtDeadline(t, h, h.Lease().Deadline, 5*time.Second)
	if err := h.Err(); !errors.Is(err, fencing.ErrLeaseLost) {
		t.Errorf("Err() = %v, want ErrLeaseLost", err)
	}
}

// Every renewal's outcome unknown (the store never got it): nothing was
// confirmed, so the Deadline stays the grant's and the lease ends there,
// with the unknown outcome of the last renewal answered before it. That a
// renewal was answered before the Deadline is known once an attempt of the
// next one was sent before it (one renewal at a time, at most 1+retries
// attempts each); on a host too slow for that within the TTL the loss has
// no answer to report, and the test tries again with twice the TTL.
func TestHoldUnknownRenewalIsNotConfirmed(t *testing.T) {
	const retries = 3
	for ttl := 300 * time.Millisecond; ; ttl *= 2 {
		sent := holdUnknownRenewals(t, ttl, retries)
		if sent > retries+1 {
			return
		}
		if ttl >= 5*time.Second {
			t.Fatalf("TTL %v: %d renewal attempts sent before the Deadline, none of a second renewal: the host is too slow to judge", ttl, sent)
		}
		t.Logf("TTL %v: %d renewal attempts sent before the Deadline, none of a second renewal: again with twice the TTL", ttl, sent)
	}
}

// holdUnknownRenewals holds a lease with ttl whose renewals all end with an
// unknown outcome after 1+retries attempts, checks that it ends at the
// grant's Deadline (and, when a second renewal was sent before it, that Err
// carries the unknown outcome), and returns how many renewal attempts were
// sent before the Deadline.
func holdUnknownRenewals(t *testing.T, ttl time.Duration, retries int) int {
	t.Helper()
	f := newFaulty(t)
	unknown := fmt.Errorf("test: connection reset: %w", backend.ErrOutcomeUnknown)
	f.set(func(f *faulty) { f.renewErr = unknown })
	c := fencing.New(f, fencing.WithOutcomeRetries(retries))
	h, err := c.Hold(context.Background(), "k", ttl, fencing.WithRenewInterval(50*time.Millisecond))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	defer h.Release(context.Background())
	granted := h.Lease().Deadline
	endsAtDeadline(t, h, granted, 5*time.Second)
	if d := h.Lease().Deadline; !d.Equal(granted) {
		t.Errorf("Lease().Deadline moved from %v to %v on renewals whose outcome was unknown", granted, d)
	}
	f.mu.Lock()
	sent := 0
	for _, at := range f.renewSent {
		if at.Before(granted) {
			sent++
		}
	}
	f.mu.Unlock()
	err = h.Err()
	if !errors.Is(err, fencing.ErrLeaseLost) {
		t.Errorf("Err() = %v, want ErrLeaseLost", err)
	}
	if sent > retries+1 && !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Errorf("Err() = %v, want ErrLeaseLost with the unknown outcome (%d renewal attempts sent before the Deadline)", err, sent)
	}
	return sent
}

// A renewal that took effect but whose answer came after the Deadline
// passed: the loss stands, and Lease() keeps the Deadline it was lost at.
func TestHoldRenewalConfirmedAfterLossChangesNothing(t *testing.T) {
	f := newFaulty(t)
	const ttl = 400 * time.Millisecond
	f.set(func(f *faulty) { f.renewDelay = 2 * ttl })
	c := fencing.New(f)
	h, err := c.Hold(context.Background(), "k", ttl, fencing.WithRenewInterval(50*time.Millisecond))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	waitDone(t, h, 10*time.Second)
	lostAt := h.Lease().Deadline
	f.mu.Lock()
	renewals := len(f.renewSent)
	f.mu.Unlock()
	if renewals == 0 {
		t.Fatal("lost before any renewal was sent")
	}
	h.Release(context.Background()) // waits for the slow renewal's answer
	if d := h.Lease().Deadline; !d.Equal(lostAt) {
		t.Errorf("Lease().Deadline moved from %v to %v after the loss", lostAt, d)
	}
	if err := h.Err(); !errors.Is(err, fencing.ErrLeaseLost) {
		t.Errorf("Err() = %v, want ErrLeaseLost", err)
	}
}

// A holder that runs again past its Deadline before the expiry timer has
// (a process frozen past it, a starved timer goroutine) sees the lease
// lost, whichever way it looks first. The Held's clock is moved past the
// Deadline while its timers stay on the real one, a minute away: neither
// the expiry timer nor the renewer (asleep for a third of the TTL) can end
// the lease first, so each look alone must find the loss. The timer then
// fires late, changing nothing.
func TestHeldContextEndsAtDeadlineWhenTimerIsLate(t *testing.T) {
	ctx := context.Background()
	lost := func(err error) bool { return errors.Is(err, fencing.ErrLeaseLost) }
	probes := []struct {
		name string
		look func(h *fencing.Held) error
		want func(error) bool
	}{
		{"Context().Err", func(h *fencing.Held) error { return h.Context().Err() },
			func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"Context().Done", func(h *fencing.Held) error {
			select {
			case <-h.Context().Done():
				return context.Cause(h.Context())
			default:
				return nil
			}
		}, lost},
		{"context.Cause", func(h *fencing.Held) error { return context.Cause(h.Context()) }, lost},
		{"Held.Err", func(h *fencing.Held) error { return h.Err() }, lost},
		{"Held.Done", func(h *fencing.Held) error {
			select {
			case <-h.Done():
				return h.Err()
			default:
				return nil
			}
		}, lost},
		{"Release", func(h *fencing.Held) error { return h.Release(ctx) }, lost},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			mem := memorybackend.New()
			defer mem.Close()
			c := fencing.New(mem)
			h, err := c.Hold(ctx, "k", time.Minute)
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			fire := fencing.LateExpiry(h)
			if err := h.Err(); err != nil {
				t.Fatalf("lost before the Deadline: %v", err)
			}
			fencing.PastDeadline(h, time.Millisecond)
			if got := p.look(h); !p.want(got) {
				t.Fatalf("past the Deadline, with its timer yet to fire, %s = %v; want the loss", p.name, got)
			}
			cause := context.Cause(h.Context())
			if !lost(cause) || !strings.Contains(cause.Error(), "deadline passed") {
				t.Errorf("cause = %v, want ErrLeaseLost: deadline passed", cause)
			}
			if err := h.Err(); err != cause {
				t.Errorf("Err() = %v, want the cause %v", err, cause)
			}
			fire() // the timer, late: the loss stands as it was
			if err := context.Cause(h.Context()); err != cause {
				t.Errorf("after the late timer, cause = %v, want %v", err, cause)
			}
			if err := h.Release(ctx); err != cause {
				t.Errorf("Release() = %v, want the loss %v", err, cause)
			}
		})
	}
}

// The renewer's own step, with nothing looking at the lease before it: an
// answer confirmed once the Deadline has passed (the Held's clock moved past
// it, its timers on the real one) ends the lease instead of moving the
// Deadline on. (In a renewal, the request's own context lookups usually
// find the loss a moment earlier; this is the last line.)
func TestHeldConfirmPastDeadlineEndsLease(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	h, err := fencing.New(mem).Hold(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	defer h.Release(context.Background())
	fencing.LateExpiry(h)
	granted := h.Lease()
	fencing.PastDeadline(h, time.Millisecond)
	renewed := granted
	renewed.Deadline = granted.Deadline.Add(time.Minute)
	if fencing.ConfirmRenewal(h, renewed) {
		t.Errorf("a renewal confirmed past the Deadline: the lease goes on")
	}
	if d := h.Lease().Deadline; !d.Equal(granted.Deadline) {
		t.Errorf("Lease().Deadline = %v after a renewal confirmed past the Deadline, want %v", d, granted.Deadline)
	}
	if err := h.Err(); !errors.Is(err, fencing.ErrLeaseLost) || !strings.Contains(err.Error(), "deadline passed") {
		t.Errorf("Err() = %v, want ErrLeaseLost: deadline passed", err)
	}
}

// The held context's Deadline is the earlier of the lease's and the
// parent's.
func TestHeldContextDeadlineIsTheEarlier(t *testing.T) {
	env := newEnv(t)
	far, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	h, err := env.c.Hold(far, "far", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	if d, ok := h.Context().Deadline(); !ok || !d.Equal(h.Lease().Deadline) {
		t.Errorf("parent an hour away: Deadline() = %v, %v; want the lease's %v", d, ok, h.Lease().Deadline)
	}
	near, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	h2, err := env.c.Hold(near, "near", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release(context.Background())
	if pd, _ := near.Deadline(); !pd.Before(h2.Lease().Deadline) {
		t.Fatalf("test setup: parent deadline %v not before the lease's %v", pd, h2.Lease().Deadline)
	} else if d, ok := h2.Context().Deadline(); !ok || !d.Equal(pd) {
		t.Errorf("parent 30s away: Deadline() = %v, %v; want the parent's %v", d, ok, pd)
	}
}

// When the parent context ends, the renewer frees the key by itself (with
// a context of its own: the parent's is done), long before the lease
// would expire, and without the holder's Release.
func TestHoldParentEndFreesKeyWithoutRelease(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := c.Hold(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	cancel()
	waitFor(t, 10*time.Second, "key freed after the parent ended", func() bool {
		_, live, err := mem.Token(context.Background(), "k")
		return err == nil && !live
	})
}

// A held lease lost for want of a confirmed renewal is counted under
// reason "deadline" (TestMetricsLeaseLostAndLockWait has "rejected").
func TestMetricsLeaseLostByDeadline(t *testing.T) {
	m := newMeter(t)
	f := newFaulty(t)
	f.set(func(f *faulty) { f.renewErr = errors.New("test: store unavailable") })
	c := fencing.New(f, fencing.WithMeterProvider(m.mp))
	h, err := c.Hold(context.Background(), "k", 200*time.Millisecond, fencing.WithRenewInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h, 10*time.Second)
	h.Release(context.Background())
	be := "fencing.backend=" + fencing.BackendName(f)
	if got := m.value(fencing.MetricLeasesLost, be+",fencing.reason=deadline"); got != 1 {
		t.Errorf("leases lost (deadline) = %d, want 1; points %v", got, m.collect(fencing.MetricLeasesLost))
	}
	if got := m.value(fencing.MetricLeasesLost, be+",fencing.reason=rejected"); got != 0 {
		t.Errorf("leases lost (rejected) = %d, want 0", got)
	}
}

// notifying is the memory backend (with its Notifier) counting grants.
type notifying struct {
	*memorybackend.Backend
	mu     sync.Mutex
	grants int
}

func (n *notifying) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	n.mu.Lock()
	n.grants++
	n.mu.Unlock()
	return n.Backend.Grant(ctx, req)
}

func (n *notifying) grantCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.grants
}

// A waiter wakes on the release's notification, not on its poll: with a
// 10s poll and a holder with a minute left, only the notification can wake
// it within seconds.
func TestLockWakesOnNotification(t *testing.T) {
	n := &notifying{Backend: memorybackend.New()}
	defer n.Close()
	c := fencing.New(n)
	ctx := context.Background()
	holder, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fencing.Held, 1)
	go func() {
		h, err := c.Lock(ctx, "k", time.Minute, fencing.WithPollInterval(10*time.Second))
		if err != nil {
			t.Errorf("Lock: %v", err)
		}
		got <- h
	}()
	// The waiter subscribes before its first attempt: once that attempt
	// was refused, a release notifies it.
	waitFor(t, 10*time.Second, "the waiter's first grant attempt", func() bool { return n.grantCount() >= 2 })
	released := time.Now()
	if err := c.Release(ctx, "k", holder.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h != nil {
			h.Release(ctx)
		}
	case <-time.After(4 * time.Second): // the poll would take 5 to 10 s
		t.Fatalf("Lock still waiting %v after the release: the notification did not wake it", time.Since(released))
	}
}

// unknownGrants is the memory backend whose every grant takes effect and
// then loses its answer; onGrant runs after each.
type unknownGrants struct {
	*memorybackend.Backend
	onGrant func()
}

func (u *unknownGrants) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	_, err := u.Backend.Grant(context.WithoutCancel(ctx), req)
	if u.onGrant != nil {
		u.onGrant()
	}
	if err != nil {
		return backend.Lease{}, err
	}
	return backend.Lease{}, fmt.Errorf("test: answer lost: %w", backend.ErrOutcomeUnknown)
}

// Lock that gives up while its grant's outcome is unknown releases the
// lease that grant took: the caller is never locked out by its own lease.
// Both ways it can give up: its context ends between resends, or during
// the very first attempt.
func TestLockGivingUpSettlesUnknownGrant(t *testing.T) {
	for _, when := range []string{"between resends", "during the first attempt"} {
		t.Run(when, func(t *testing.T) {
			u := &unknownGrants{Backend: memorybackend.New()}
			defer u.Close()
			c := fencing.New(u, fencing.WithOutcomeRetries(0))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if when == "during the first attempt" {
				u.onGrant = cancel
			} else {
				var once sync.Once
				u.onGrant = func() { once.Do(func() { time.AfterFunc(50*time.Millisecond, cancel) }) }
			}
			h, err := c.Lock(ctx, "k", time.Minute)
			if err == nil {
				h.Release(context.Background())
				t.Fatal("Lock returned a lease although every grant's answer was lost")
			}
			var oe *fencing.OutcomeError
			if !errors.As(err, &oe) || !oe.Settled {
				t.Errorf("Lock: %v, want a settled *OutcomeError", err)
			}
			if tok, live, _ := u.Token(context.Background(), "k"); live {
				t.Errorf("the key is still held (token %d) after Lock gave up", tok)
			}
		})
	}
}

// A grant whose answer was lost, then resends that never left (a refused
// dial) until the wait ends: the outcome is the first attempt's, unknown,
// and Lock's error says that once, naming the key once, with the resends'
// failure as the reason it could not be settled and the lease it may have
// taken released.
func TestLockUnknownThenNotSentIsOneOutcome(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	u := &unknownGrants{Backend: memorybackend.New()}
	defer u.Close()
	nb := &notSentAfter{unknownGrants: u, err: fmt.Errorf("test: grant: not sent: %w", refused)}
	c := fencing.New(nb, fencing.WithOutcomeRetries(0))
	h, err := c.Lock(context.Background(), "jobs/k", time.Minute, fencing.WithWaitTimeout(300*time.Millisecond))
	if err == nil {
		h.Release(context.Background())
		t.Fatal("Lock returned a lease although no grant was answered")
	}
	var oe *fencing.OutcomeError
	if !errors.As(err, &oe) || !oe.Settled || !errors.Is(err, fencing.ErrOutcomeUnknown) || !errors.Is(err, refused) {
		t.Fatalf("Lock: %v; want a settled *OutcomeError wrapping ErrOutcomeUnknown and the refused dial", err)
	}
	msg := err.Error()
	if strings.Count(msg, "outcome unknown") != 1 || strings.Contains(msg, "not sent") ||
		strings.Count(msg, "jobs/k") != 1 || strings.Contains(msg, "\n") || !strings.Contains(msg, refused.Error()) {
		t.Errorf("Lock: %q; want one outcome (unknown), the key once, on one line, with the refused dial", msg)
	}
}

// notSentAfter answers the first grant as unknownGrants does, and refuses
// every later one before sending it, with err.
type notSentAfter struct {
	*unknownGrants
	grants atomic.Int32
	err    error
}

func (n *notSentAfter) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if n.grants.Add(1) > 1 {
		return backend.Lease{}, n.err
	}
	return n.unknownGrants.Grant(ctx, req)
}
