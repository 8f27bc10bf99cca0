package fencing_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/heldtest"
	"github.com/fencing-go/fencing/internal/testing/logtest"
	"github.com/fencing-go/fencing/memorybackend"
)

// Tests of WithMaxHold. The memory backend runs on a fake clock that never
// moves, so its leases never expire by themselves: a key that becomes free
// was released.

// sentReq is one grant or renewal as the backend saw it.
type sentReq struct {
	at      time.Time // just after the Coordinator read its send time
	timeout time.Duration
}

// asked is the memory backend (with its Notifier) on a fake clock,
// recording what each grant and renewal asked for, and when each release
// came.
type asked struct {
	*memorybackend.Backend
	mu       sync.Mutex
	grants   []sentReq
	renewals []sentReq
	releases []time.Time
	hang     bool          // Release waits for its context to end
	gate     chan struct{} // when set, Release waits for it to close
}

func newAsked(t *testing.T) *asked {
	mem := memorybackend.New(memorybackend.WithClock(memorybackend.NewFakeClock(epoch)))
	t.Cleanup(func() { mem.Close() })
	return &asked{Backend: mem}
}

func (a *asked) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	a.mu.Lock()
	a.grants = append(a.grants, sentReq{time.Now(), req.Timeout})
	a.mu.Unlock()
	return a.Backend.Grant(ctx, req)
}

func (a *asked) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	a.mu.Lock()
	a.renewals = append(a.renewals, sentReq{time.Now(), req.Timeout})
	a.mu.Unlock()
	return a.Backend.Renew(ctx, req)
}

func (a *asked) Release(ctx context.Context, key, leaseID string) error {
	a.mu.Lock()
	a.releases = append(a.releases, time.Now())
	hang, gate := a.hang, a.gate
	a.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if hang {
		<-ctx.Done() // a server that does not answer
		return ctx.Err()
	}
	return a.Backend.Release(ctx, key, leaseID)
}

// sent returns copies of what was recorded.
func (a *asked) sent() (grants, renewals []sentReq, releases []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]sentReq(nil), a.grants...), append([]sentReq(nil), a.renewals...), append([]time.Time(nil), a.releases...)
}

// wantMaxHoldLoss fails t unless err is the maximum hold's loss.
func wantMaxHoldLoss(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, fencing.ErrLeaseLost) || !errors.Is(err, fencing.ErrMaxHold) || !strings.Contains(err.Error(), "maximum hold reached") {
		t.Fatalf("%s = %v, want ErrLeaseLost: maximum hold reached (ErrMaxHold)", what, err)
	}
}

// wantReleasedBy fails t unless the key is freed (by a release: the fake
// clock lets nothing expire) without the holder calling Release, and
// returns when that release reached the backend.
func wantReleasedBy(t *testing.T, a *asked, key string) time.Time {
	t.Helper()
	waitFor(t, 10*time.Second, "the key released at the maximum hold", func() bool {
		_, live, err := a.Token(context.Background(), key)
		return err == nil && !live
	})
	_, _, rels := a.sent()
	if len(rels) != 1 {
		t.Fatalf("%d releases, want 1", len(rels))
	}
	return rels[0]
}

// The real-time case: renewed every 50ms, the hold ends at grant send + d
// exactly. The last renewal asks only for the time left, so the Deadline
// never passes that moment; the Context ends there (measured against a
// timer set for the Deadline, not a guessed sleep), with the reason; and
// then, not before, the lease is released.
func TestMaxHoldShortensLastRenewalAndReleases(t *testing.T) {
	a := newAsked(t)
	c := fencing.New(a)
	const ttl, maxHold = 600 * time.Millisecond, 900 * time.Millisecond
	h, err := c.Hold(context.Background(), "k", ttl, fencing.WithRenewInterval(50*time.Millisecond), fencing.WithMaxHold(maxHold))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	defer h.Release(context.Background())
	end := h.Lease().Deadline.Add(maxHold - ttl) // the grant's send + maxHold
	heldtest.EndsAtDeadline(t, h, 10*time.Second, 50*time.Millisecond)
	if d := h.Lease().Deadline; !d.Equal(end) {
		t.Errorf("the last Deadline is %v after the grant's send, want the maximum hold %v", d.Sub(end)+maxHold, maxHold)
	}
	wantMaxHoldLoss(t, "Err()", h.Err())
	wantMaxHoldLoss(t, "context.Cause", context.Cause(h.Context()))
	// The Context ends first (the expiry timer, at the Deadline), then the
	// lease is released.
	if released := wantReleasedBy(t, a, "k"); released.Before(end) {
		t.Errorf("released %v before the maximum hold's Deadline", end.Sub(released))
	}

	grants, renewals, _ := a.sent()
	if len(grants) != 1 || grants[0].timeout != ttl {
		t.Fatalf("grants %+v, want one asking for the TTL %v", grants, ttl)
	}
	if len(renewals) < 2 {
		t.Fatalf("%d renewals, want several", len(renewals))
	}
	for i, r := range renewals {
		last := i == len(renewals)-1
		switch {
		case !last && r.timeout != ttl:
			t.Errorf("renewal %d of %d asked for %v, want the TTL %v", i+1, len(renewals), r.timeout, ttl)
		case last && (r.timeout >= ttl || r.timeout <= 0):
			t.Errorf("the last renewal asked for %v, want the time left, less than the TTL %v", r.timeout, ttl)
		case last && r.at.Add(r.timeout).Sub(end) > 5*time.Millisecond:
			t.Errorf("the last renewal asked for %v past the maximum hold", r.at.Add(r.timeout).Sub(end))
		}
	}
	if err := h.Release(context.Background()); !errors.Is(err, fencing.ErrMaxHold) {
		t.Errorf("Release after the maximum hold = %v, want the loss", err)
	}
}

// A maximum hold no longer than the TTL: the grant itself asks for d, and
// nothing is renewed.
func TestMaxHoldNotAboveTTLIsOneShortLease(t *testing.T) {
	const maxHold = 150 * time.Millisecond
	t.Run("Hold", func(t *testing.T) {
		a := newAsked(t)
		h, err := fencing.New(a).Hold(context.Background(), "k", time.Minute, fencing.WithMaxHold(maxHold))
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		defer h.Release(context.Background())
		if dl, ok := h.Context().Deadline(); !ok || time.Until(dl) > maxHold {
			t.Fatalf("Context().Deadline() = %v, %v; want at most %v from now", time.Until(dl), ok, maxHold)
		}
		heldtest.EndsAtDeadline(t, h, 10*time.Second, 50*time.Millisecond)
		wantMaxHoldLoss(t, "Err()", h.Err())
		wantReleasedBy(t, a, "k")
		grants, renewals, _ := a.sent()
		if len(grants) != 1 || grants[0].timeout != maxHold || len(renewals) != 0 {
			t.Fatalf("grants %+v and renewals %+v; want one grant for %v, no renewal", grants, renewals, maxHold)
		}
	})
	t.Run("Do", func(t *testing.T) {
		a := newAsked(t)
		err := fencing.New(a).Do(context.Background(), "k", time.Minute, func(ctx context.Context, _ fencing.Lease) error {
			<-ctx.Done() // wedged work, stopped by the cap
			return ctx.Err()
		}, fencing.WithMaxHold(maxHold))
		wantMaxHoldLoss(t, "Do", err)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v, want fn's error too", err)
		}
		if _, live, _ := a.Token(context.Background(), "k"); live {
			t.Errorf("the key is still held after Do")
		}
	})
}

// Lock: the maximum hold counts from the grant that got the key, not from
// when the wait began.
func TestMaxHoldLockCountsFromGrant(t *testing.T) {
	a := newAsked(t)
	c := fencing.New(a)
	ctx := context.Background()
	holder, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const ttl, maxHold = 400 * time.Millisecond, 600 * time.Millisecond
	waitStart := time.Now()
	type result struct {
		h   *fencing.Held
		err error
	}
	locked := make(chan result, 1)
	go func() {
		h, err := c.Lock(ctx, "k", ttl, fencing.WithRenewInterval(50*time.Millisecond), fencing.WithMaxHold(maxHold))
		locked <- result{h, err}
	}()
	// Refused at least once, and waiting longer than the maximum hold.
	waitFor(t, 10*time.Second, "a refused grant and the maximum hold passed", func() bool {
		g, _, _ := a.sent()
		return len(g) >= 2 && time.Since(waitStart) > maxHold
	})
	released := time.Now()
	if err := c.Release(ctx, "k", holder.ID); err != nil {
		t.Fatal(err)
	}
	r := <-locked
	if r.err != nil {
		t.Fatalf("Lock: %v", r.err)
	}
	h := r.h
	defer h.Release(ctx)
	heldtest.EndsAtDeadline(t, h, 10*time.Second, 50*time.Millisecond)
	wantMaxHoldLoss(t, "Err()", h.Err())
	grants, _, _ := a.sent()
	got := grants[len(grants)-1] // the grant that got the key
	last := h.Lease().Deadline
	// The Coordinator reads a grant's send time a few statements before
	// the wrapper records the call: the hold's end is maxHold after the
	// one, and at most that after the other. Counted from the wait's
	// start, it would have ended before the release that let it in.
	if since := last.Sub(got.at); since > maxHold || since < maxHold-50*time.Millisecond || !last.After(released) {
		t.Fatalf("the hold ended %v after the wait began and %v after the grant that got the key; want %v after that grant",
			last.Sub(waitStart), since, maxHold)
	}
	// The release of the holder's lease and the one at the maximum hold.
	waitFor(t, 10*time.Second, "the key released at the maximum hold", func() bool {
		_, live, err := a.Token(ctx, "k")
		return err == nil && !live
	})
}

func TestMaxHoldBadValues(t *testing.T) {
	env := newEnv(t)
	for _, d := range []time.Duration{0, -time.Second, backend.MinTimeout - 1} {
		h, err := env.c.Hold(context.Background(), "k", time.Second, fencing.WithMaxHold(d))
		if !errors.Is(err, fencing.ErrInvalidOption) {
			t.Errorf("Hold with WithMaxHold(%v): %v, want ErrInvalidOption", d, err)
		}
		if err == nil {
			h.Release(context.Background())
		}
		h, err = env.c.Lock(context.Background(), "k", time.Second, fencing.WithMaxHold(d), fencing.WithWaitTimeout(time.Second))
		if !errors.Is(err, fencing.ErrInvalidOption) {
			t.Errorf("Lock with WithMaxHold(%v): %v, want ErrInvalidOption", d, err)
		}
		if err == nil {
			h.Release(context.Background())
		}
		err = env.c.Do(context.Background(), "k", time.Second, func(context.Context, fencing.Lease) error {
			t.Errorf("Do with WithMaxHold(%v): fn ran", d)
			return nil
		}, fencing.WithMaxHold(d))
		if !errors.Is(err, fencing.ErrInvalidOption) {
			t.Errorf("Do with WithMaxHold(%v): %v, want ErrInvalidOption", d, err)
		}
	}
	if _, live := env.token(t, "k"); live {
		t.Fatalf("a refused option left a lease")
	}
}

// A holder that releases before the cap has lost nothing.
func TestMaxHoldReleaseBeforeIsNoLoss(t *testing.T) {
	env := newEnv(t)
	h, err := env.c.Hold(context.Background(), "k", time.Minute, fencing.WithMaxHold(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(context.Background()); err != nil || h.Err() != nil {
		t.Fatalf("Release before the maximum hold = %v, Err() = %v; want nil, nil", err, h.Err())
	}
}

// The cap's loss is counted under its own reason and logged as such, and
// the release at the cap is logged after it.
func TestMaxHoldMetricAndLog(t *testing.T) {
	m := newMeter(t)
	logs := &logtest.Records{}
	env := newEnv(t, fencing.WithMeterProvider(m.mp), fencing.WithLogger(slog.New(logs)))
	h, err := env.c.Hold(context.Background(), "k", time.Minute, fencing.WithMaxHold(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	waitDone(t, h, 10*time.Second)
	// The release is logged after its answer, which comes back after the
	// store has ended the lease: wait for the log, not for the store.
	waitFor(t, 10*time.Second, "the release at the maximum hold, logged", func() bool {
		for _, rec := range logs.All() {
			if rec.Message == "fencing: release" {
				return true
			}
		}
		return false
	})
	if _, live := env.token(t, "k"); live {
		t.Error("the lease is live after its release at the maximum hold")
	}
	for reason, want := range map[string]int64{"max_hold": 1, "rejected": 0, "deadline": 0} {
		if got := m.value(fencing.MetricLeasesLost, mem+",fencing.reason="+reason); got != want {
			t.Errorf("leases lost (%s) = %d, want %d; points %v", reason, got, want, m.collect(fencing.MetricLeasesLost))
		}
	}
	var msgs []string
	lost := -1
	for i, rec := range logs.All() {
		msgs = append(msgs, rec.Message)
		if rec.Message != "fencing: lease lost" {
			continue
		}
		attrs := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if attrs["reason"] != "max_hold" || !strings.Contains(attrs["error"], "maximum hold reached") {
			t.Errorf("lost-lease log %v, want reason max_hold and the error saying so", attrs)
		}
		lost = i
	}
	if lost < 0 || !slices.Contains(msgs[lost:], "fencing: release") {
		t.Errorf("logs %q, want the loss, then the release", msgs)
	}
}

// The release at the cap does not hold up the holder's Release, which is
// bounded by its own context: with a server that does not answer, Release
// returns when its context ends, not when the cap's release gives up (a TTL
// later).
func TestMaxHoldReleaseAtCapYieldsToHolder(t *testing.T) {
	a := newAsked(t)
	a.hang = true
	h, err := fencing.New(a).Hold(context.Background(), "k", time.Minute, fencing.WithMaxHold(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h, 10*time.Second)
	waitFor(t, 10*time.Second, "the release at the cap sent", func() bool {
		_, _, rels := a.sent()
		return len(rels) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- h.Release(ctx) }()
	select {
	case err := <-returned:
		wantMaxHoldLoss(t, "Release", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Release waited for the release at the cap, which a TTL (a minute) bounds")
	}
}

// At the maximum hold the Context ends first, at the Deadline, and the
// lease is released after that: until the release is answered the
// coordinator still counts the lease live. A release sent first would end
// the Context late (after a round trip) or the hold early.
func TestMaxHoldContextEndsBeforeRelease(t *testing.T) {
	a := newAsked(t)
	gate := make(chan struct{})
	a.gate = gate
	h, err := fencing.New(a).Hold(context.Background(), "k", time.Minute, fencing.WithMaxHold(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	heldtest.EndsAtDeadline(t, h, 10*time.Second, 50*time.Millisecond) // with no release answered
	wantMaxHoldLoss(t, "Err()", h.Err())
	if _, live, err := a.Token(context.Background(), "k"); err != nil || !live {
		t.Fatalf("Token = live %v, %v while the release at the cap waits; want live", live, err)
	}
	waitFor(t, 10*time.Second, "the release at the cap sent", func() bool {
		_, _, rels := a.sent()
		return len(rels) == 1
	})
	close(gate)
	wantReleasedBy(t, a, "k")
}
