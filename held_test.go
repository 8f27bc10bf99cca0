package fencing_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// Tests of what the Coordinator alone does around Hold, Lock and Do: its
// timers, options and settling. What every backend must do with them is in
// package conformance.

// faulty wraps a real backend and lets a test delay or fail renewals and
// grants. It hides the backend's optional capabilities unless notify is
// set, which is how a third-party backend without them looks.
type faulty struct {
	backend.Backend

	mu         sync.Mutex
	renewDelay time.Duration // after the call: the reply is slow
	grantDelay time.Duration
	renewErr   error         // returned instead of renewing
	hang       chan struct{} // when set, Renew waits for it, ignoring ctx
	renewSent  []time.Time   // just before each renewal reached the backend
	grantSent  []time.Time
}

func (f *faulty) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	f.mu.Lock()
	f.grantSent = append(f.grantSent, time.Now())
	delay := f.grantDelay
	f.mu.Unlock()
	l, err := f.Backend.Grant(ctx, req)
	time.Sleep(delay)
	return l, err
}

func (f *faulty) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	f.mu.Lock()
	f.renewSent = append(f.renewSent, time.Now())
	delay, rerr, hang := f.renewDelay, f.renewErr, f.hang
	f.mu.Unlock()
	if hang != nil {
		<-hang // a backend that ignores its context
	}
	if rerr != nil {
		return backend.Lease{}, rerr
	}
	l, err := f.Backend.Renew(ctx, req)
	time.Sleep(delay)
	return l, err
}

func newFaulty(t *testing.T) *faulty {
	mem := memorybackend.New()
	t.Cleanup(func() { mem.Close() })
	return &faulty{Backend: mem}
}

func (f *faulty) set(fn func(f *faulty)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// waitDone waits for h's context to end, failing after bound.
func waitDone(t *testing.T, h *fencing.Held, bound time.Duration) time.Time {
	t.Helper()
	select {
	case <-h.Done():
		return time.Now()
	case <-time.After(bound):
		t.Fatalf("the held lease's context did not end within %v", bound)
		return time.Time{}
	}
}

// A renewal whose reply never comes, from a backend that does not even
// honour its context: the lease's context still ends at its Deadline.
func TestHoldEndsAtDeadlineWhenRenewalHangs(t *testing.T) {
	f := newFaulty(t)
	hang := make(chan struct{})
	f.set(func(f *faulty) { f.hang = hang })
	c := fencing.New(f)
	const ttl = 300 * time.Millisecond
	h, err := c.Hold(context.Background(), "k", ttl, fencing.WithRenewInterval(50*time.Millisecond))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	endsAtDeadline(t, h, h.Lease().Deadline, 10*time.Second)
	if err := h.Err(); !errors.Is(err, fencing.ErrLeaseLost) || !strings.Contains(err.Error(), "deadline passed") {
		t.Errorf("Err() = %v, want ErrLeaseLost: deadline passed", err)
	}
	close(hang)
	if err := h.Release(context.Background()); !errors.Is(err, fencing.ErrLeaseLost) {
		t.Errorf("Release after the loss = %v, want the loss", err)
	}
}

// Slow replies: each Deadline counts from when its request was sent, not from
// when the answer came.
func TestHoldDeadlineCountsFromSend(t *testing.T) {
	f := newFaulty(t)
	const delay = 120 * time.Millisecond
	f.set(func(f *faulty) { f.renewDelay, f.grantDelay = delay, delay })
	c := fencing.New(f)
	const ttl = time.Second
	h, err := c.Hold(context.Background(), "k", ttl, fencing.WithRenewInterval(100*time.Millisecond))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	defer h.Release(context.Background())
	f.mu.Lock()
	grantSent := f.grantSent[0]
	f.mu.Unlock()
	if d := h.Lease().Deadline; d.After(grantSent.Add(ttl)) {
		t.Fatalf("grant's Deadline %v is after its send + ttl (%v): counted from the reply", d, grantSent.Add(ttl))
	}
	first := h.Lease().Deadline
	waitFor(t, 10*time.Second, "a confirmed renewal", func() bool { return h.Lease().Deadline.After(first) || h.Err() != nil })
	l := h.Lease()
	if !l.Deadline.After(first) {
		t.Fatalf("no renewal confirmed: %v", h.Err())
	}
	// The Coordinator reads its send time just before the wrapper records
	// the call, so a Deadline from the send is at most ttl after one
	// recorded call, and a Deadline from the reply is delay later.
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.renewSent {
		if d := s.Add(ttl).Sub(l.Deadline); d >= 0 && d < delay/2 {
			return
		}
	}
	t.Fatalf("renewal's Deadline %v is not ttl after any renewal's send %v: counted from the reply", l.Deadline, f.renewSent)
}

// Renewals that keep failing: the warning comes before the Deadline, then
// the loss, with the last error in it.
func TestHoldWarnsThenLosesOnTransientErrors(t *testing.T) {
	f := newFaulty(t)
	unavailable := errors.New("test: store unavailable")
	f.set(func(f *faulty) { f.renewErr = unavailable })
	c := fencing.New(f)
	const ttl = 400 * time.Millisecond
	h, err := c.Hold(context.Background(), "k", ttl, fencing.WithWarning(150*time.Millisecond))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	defer h.Release(context.Background())
	select {
	case l := <-h.Warning():
		// Read late on a busy machine, the warning has less left, never
		// more; and a lease with time left is not lost.
		if r := l.Remaining(); r > 160*time.Millisecond || (r > 0 && h.Err() != nil) {
			t.Fatalf("warning with %v left and Err %v; want at most 150ms left, still held", r, h.Err())
		}
	case <-h.Done():
		// Both may be ready when this test runs late: the loss stops the
		// warning's timer, so a warning there was due before the loss.
		select {
		case <-h.Warning():
		default:
			t.Fatalf("lost before the warning: %v", h.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no warning")
	}
	waitDone(t, h, 10*time.Second)
	if err := h.Err(); !errors.Is(err, fencing.ErrLeaseLost) || !errors.Is(err, unavailable) {
		t.Fatalf("Err() = %v, want ErrLeaseLost with the last attempt's error", err)
	}
	f.mu.Lock()
	attempts := len(f.renewSent)
	f.mu.Unlock()
	if attempts < 2 {
		t.Fatalf("%d renewal attempts before the Deadline, want retries", attempts)
	}
}

// A transient failure that clears in time costs nothing: the lease goes on.
// A host too slow to retry within the TTL loses the lease at its Deadline
// (with the failures still on, or before a renewal after them came back):
// then the test tries again with twice the TTL. A renewer that gives up on
// a transient error, or stops retrying, loses it at every TTL.
func TestHoldRetriesTransientErrors(t *testing.T) {
	for ttl := 600 * time.Millisecond; ; ttl *= 2 {
		err := holdThroughTransientErrors(t, ttl)
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "deadline passed") || ttl >= 4800*time.Millisecond {
			t.Fatalf("TTL %v: Err() = %v after the failures cleared, want nil", ttl, err)
		}
		t.Logf("TTL %v: lost at its Deadline on this host (%v): again with twice the TTL", ttl, err)
	}
}

// holdThroughTransientErrors holds a lease with ttl whose renewals fail
// until two attempts were sent, then succeed, and returns h.Err() once a
// renewal after the failures was confirmed or the lease was lost.
func holdThroughTransientErrors(t *testing.T, ttl time.Duration) error {
	t.Helper()
	f := newFaulty(t)
	f.set(func(f *faulty) { f.renewErr = errors.New("test: blip") })
	c := fencing.New(f)
	h, err := c.Hold(context.Background(), "k", ttl)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	defer h.Release(context.Background())
	first := h.Lease().Deadline
	waitFor(t, 10*time.Second, "two failed renewal attempts", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.renewSent) >= 2 || h.Err() != nil
	})
	f.set(func(f *faulty) { f.renewErr = nil })
	waitFor(t, 10*time.Second, "a renewal confirmed after the failures", func() bool {
		return h.Lease().Deadline.After(first) || h.Err() != nil
	})
	return h.Err()
}

func TestHoldBadOptions(t *testing.T) {
	env := newEnv(t)
	for name, opts := range map[string][]fencing.HoldOption{
		"nil option":                {nil},
		"interval equal to the TTL": {fencing.WithRenewInterval(time.Second)},
		"interval above the TTL":    {fencing.WithRenewInterval(2 * time.Second)},
		"zero interval":             {fencing.WithRenewInterval(0)},
		"negative warning":          {fencing.WithWarning(-time.Millisecond)},
	} {
		for _, op := range []string{"Hold", "Lock", "Do"} {
			var err error
			switch op {
			case "Hold":
				_, err = env.c.Hold(context.Background(), "k", time.Second, opts...)
			case "Lock":
				_, err = env.c.Lock(context.Background(), "k", time.Second, lockOptions(opts)...)
			case "Do":
				err = env.c.Do(context.Background(), "k", time.Second, func(context.Context, fencing.Lease) error {
					t.Errorf("%s, %s: fn ran", op, name)
					return nil
				}, opts...)
			}
			if !errors.Is(err, fencing.ErrInvalidOption) {
				t.Errorf("%s with %s: %v, want ErrInvalidOption", op, name, err)
			}
		}
	}
	// The options of Lock's wait, which Hold and Do do not take (see
	// TestWaitOptionsAreLockOnly).
	for name, opt := range map[string]fencing.LockOption{
		"nil option":             nil,
		"poll below the minimum": fencing.WithPollInterval(time.Millisecond),
		"zero wait timeout":      fencing.WithWaitTimeout(0),
	} {
		if _, err := env.c.Lock(context.Background(), "k", time.Second, opt); !errors.Is(err, fencing.ErrInvalidOption) {
			t.Errorf("Lock with %s: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, live := env.token(t, "k"); live {
		t.Fatalf("a rejected Hold left a lease")
	}
	if _, err := env.c.Hold(context.Background(), "k", 0); !errors.Is(err, fencing.ErrInvalidTimeout) {
		t.Fatalf("Hold with a zero TTL: %v, want ErrInvalidTimeout", err)
	}
	if _, err := env.c.Hold(context.Background(), "k", time.Second, fencing.WithMargin(-1)); !errors.Is(err, fencing.ErrInvalidMargin) {
		t.Fatalf("Hold with a negative margin: %v, want ErrInvalidMargin", err)
	}
}

// TestWaitOptionsAreLockOnly: the options of Lock's wait are no
// HoldOption, so Hold, Do and semaphore.Semaphore.Acquire, which cannot
// honour them, do not compile with them.
func TestWaitOptionsAreLockOnly(t *testing.T) {
	for name, o := range map[string]fencing.LockOption{
		"WithFIFO":         fencing.WithFIFO(),
		"WithPollInterval": fencing.WithPollInterval(time.Second),
		"WithWaitTimeout":  fencing.WithWaitTimeout(time.Second),
	} {
		if _, ok := o.(fencing.HoldOption); ok {
			t.Errorf("%s is a HoldOption: Hold and Do would take it and ignore it", name)
		}
	}
}

// lockOptions returns Hold's options as Lock's.
func lockOptions(opts []fencing.HoldOption) []fencing.LockOption {
	lock := make([]fencing.LockOption, len(opts))
	for i, o := range opts {
		lock[i] = o
	}
	return lock
}

// A grant whose every response is lost: the caller learns the lease ID and
// can free the key with it.
func TestGrantOutcomeErrorCarriesLeaseID(t *testing.T) {
	l, _ := newLossy(t, 4) // the first try and three resends
	c := fencing.New(l)
	ctx := context.Background()
	_, err := c.Grant(ctx, "k", time.Minute)
	var oe *fencing.OutcomeError
	if !errors.As(err, &oe) || !errors.Is(err, fencing.ErrOutcomeUnknown) {
		t.Fatalf("Grant with every response lost: %v, want an *OutcomeError", err)
	}
	if oe.Op != "grant" || oe.Key != "k" || oe.LeaseID != l.grantIDs[0] || oe.Settled {
		t.Fatalf("OutcomeError = %+v, want op grant, key k, the request's lease ID, not settled", oe)
	}
	if strings.Contains(err.Error(), oe.LeaseID) {
		t.Fatalf("error message %q shows the lease ID, a credential", err)
	}
	if _, err := c.Grant(ctx, "k", time.Minute); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("the lost grant took effect, so the key should be held: %v", err)
	}
	if err := c.Release(ctx, oe.Key, oe.LeaseID); err != nil {
		t.Fatalf("Release with the OutcomeError's lease ID: %v", err)
	}
	if _, err := c.Grant(ctx, "k", time.Minute); err != nil {
		t.Fatalf("Grant after settling: %v", err)
	}
}

// Hold never leaves the caller locked out by its own lease.
func TestHoldSettlesUnknownGrant(t *testing.T) {
	l, _ := newLossy(t, 4)
	c := fencing.New(l)
	_, err := c.Hold(context.Background(), "k", time.Minute)
	var oe *fencing.OutcomeError
	if !errors.As(err, &oe) || !oe.Settled {
		t.Fatalf("Hold with every grant response lost: %v, want a settled *OutcomeError", err)
	}
	if tok, live, _ := l.Token(context.Background(), "k"); live {
		t.Fatalf("the key is still held (token %d) after Hold settled", tok)
	}
}

// Lock adopts the lease a grant with an unknown outcome took: same ID, and a
// Deadline from that first send.
func TestLockAdoptsUnknownGrant(t *testing.T) {
	l, _ := newLossy(t, 2)
	c := fencing.New(l, fencing.WithOutcomeRetries(0))
	// A bound of its own: a Lock that does not adopt its grant waits for
	// that lease, which on the fake clock never expires.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := c.Lock(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer h.Release(context.Background())
	if h.Lease().ID != l.grantIDs[0] || len(l.grantIDs) != 3 {
		t.Fatalf("Lock holds %q after grants %q; want the first grant's lease, resent twice", h.Lease().ID, l.grantIDs)
	}
	// The Coordinator reads the send time before the wrapper sees the
	// call, so a Deadline from the first send is at most a minute after the
	// wrapper's first call; one from a later send (after a pause of at
	// least MinPollInterval) would be later than that, however slow the
	// machine.
	if first := l.grantAt[0].Add(time.Minute); h.Lease().Deadline.After(first) || h.Token() != 1 {
		t.Fatalf("Lease = %+v, want token 1 and a Deadline from the first send (by %v)", h.Lease(), first)
	}
}

// On a backend that cannot notify, Lock polls, at a bounded pace.
func TestLockWithoutNotifierPolls(t *testing.T) {
	f := newFaulty(t) // hides the memory backend's Notifier
	if _, ok := any(f).(backend.Notifier); ok {
		t.Fatal("the wrapper should hide Notifier")
	}
	c := fencing.New(f)
	ctx := context.Background()
	holder, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	time.AfterFunc(300*time.Millisecond, func() { c.Release(ctx, "k", holder.ID) })
	h, err := c.Lock(ctx, "k", time.Minute, fencing.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer h.Release(ctx)
	f.mu.Lock()
	sent := f.grantSent[1:] // the waiter's; the first is the holder's
	f.mu.Unlock()
	// About 300ms at one attempt per 10-20ms, and never faster than
	// MinPollInterval over the span the attempts took (however long a busy
	// machine stretched it).
	span := sent[len(sent)-1].Sub(sent[0])
	if maxAttempts := int(span/fencing.MinPollInterval) + 2; len(sent) < 3 || len(sent) > maxAttempts {
		t.Fatalf("%d grant attempts in %v, want polling no faster than every %v", len(sent), span, fencing.MinPollInterval)
	}
}

// When fn succeeds but the lease was lost while it ran, Do says so.
func TestDoReportsLoss(t *testing.T) {
	env := newEnv(t)
	err := env.c.Do(context.Background(), "k", time.Second, func(ctx context.Context, lease fencing.Lease) error {
		if _, err := env.c.ForceRelease(context.Background(), "k"); err != nil {
			return err
		}
		<-ctx.Done() // the next renewal is rejected
		return nil
	}, fencing.WithRenewInterval(20*time.Millisecond))
	if !errors.Is(err, fencing.ErrLeaseLost) || !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Fatalf("Do after the lease was lost under fn: %v, want ErrLeaseLost", err)
	}
}

// Errors name the key once, and a long key shortened.
func TestErrorsNameKeyOnce(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	key := "orders/" + strings.Repeat("x", 900)
	env.grant(t, key, time.Minute)
	_, err := env.c.Grant(ctx, key, time.Minute)
	msg := err.Error()
	if strings.Count(msg, "orders/") != 1 || len(msg) > 200 {
		t.Fatalf("error for a held 907-byte key: %q (%d bytes), want the key once, shortened", msg, len(msg))
	}
	huge := strings.Repeat("k", 10<<20)
	_, err = env.c.Grant(ctx, huge, time.Minute)
	if !errors.Is(err, fencing.ErrInvalidKey) || len(err.Error()) > 200 {
		t.Fatalf("error for a 10 MiB key is %d bytes, want a short ErrInvalidKey", len(err.Error()))
	}
	if msg := fencing.ErrLeaseHeld.Error(); !strings.HasPrefix(err.Error(), "grant ") || strings.Contains(msg, "kkk") {
		t.Fatalf("unexpected wording: %q", err)
	}
}
