package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// epoch is where every fake clock in these tests starts.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// env is a Coordinator over a fresh in-memory backend on a fake clock.
type env struct {
	clock *memorybackend.FakeClock
	mem   *memorybackend.Backend
	c     *fencing.Coordinator
}

func newEnv(t *testing.T, opts ...fencing.Option) *env {
	t.Helper()
	clock := memorybackend.NewFakeClock(epoch)
	mem := memorybackend.New(memorybackend.WithClock(clock))
	t.Cleanup(func() { mem.Close() })
	return &env{clock: clock, mem: mem, c: fencing.New(mem, opts...)}
}

// grant takes a lease that the test expects to succeed.
func (e *env) grant(t *testing.T, key string, timeout time.Duration, margin ...time.Duration) fencing.Lease {
	t.Helper()
	lease, err := e.c.Grant(context.Background(), key, timeout, margin...)
	if err != nil {
		t.Fatalf("Grant(%q, %v, %v): %v", key, timeout, margin, err)
	}
	return lease
}

// token reads key's live token straight from the backend.
func (e *env) token(t *testing.T, key string) (uint64, bool) {
	t.Helper()
	token, live, err := e.mem.Token(context.Background(), key)
	if err != nil {
		t.Fatalf("Token(%q): %v", key, err)
	}
	return token, live
}

// wantNextToken grants and releases key and checks that the grant got want:
// the proof that nothing before it consumed a token.
func (e *env) wantNextToken(t *testing.T, key string, want uint64) {
	t.Helper()
	lease := e.grant(t, key, time.Minute)
	if lease.Token != want {
		t.Errorf("next grant on %q got token %d, want %d", key, lease.Token, want)
	}
	if err := e.c.Release(context.Background(), key, lease.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// The Coordinator checks only what it alone takes: the number of margins
// (and its default margin, below). Every other argument check is the
// backend's, held to it by the conformance suite's BadInputChangesNothing.
func TestTwoMarginsRefused(t *testing.T) {
	e := newEnv(t)
	lease := e.grant(t, "k", 10*time.Second)
	two := []time.Duration{time.Second, time.Second}
	if l, err := e.c.Grant(context.Background(), "k2", time.Second, two...); !errors.Is(err, fencing.ErrInvalidMargin) || l != (fencing.Lease{}) {
		t.Errorf("Grant with two margins = %+v, %v; want the zero Lease and ErrInvalidMargin", l, err)
	}
	if _, err := e.c.Renew(context.Background(), "k", lease.ID, time.Hour, two...); !errors.Is(err, fencing.ErrInvalidMargin) {
		t.Errorf("Renew with two margins: %v, want ErrInvalidMargin", err)
	}
	// Neither reached the backend: k2 is free, k still ends at +11s.
	if _, live := e.token(t, "k2"); live {
		t.Error("the refused grant took k2")
	}
	e.clock.Advance(11 * time.Second)
	if _, live := e.token(t, "k"); live {
		t.Error("the refused renewal extended the lease")
	}
	e.wantNextToken(t, "k2", 1)
}

// Acquire, Extend and ValidateToken are Grant, Renew and CheckToken.
func TestAliases(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	lease, err := e.c.Acquire(ctx, "k", 10*time.Second)
	if err != nil || lease.Token != 1 {
		t.Fatalf("Acquire = %+v, %v", lease, err)
	}
	if _, err := e.c.Acquire(ctx, "k", time.Second); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Errorf("Acquire of a held key: %v, want ErrLeaseHeld", err)
	}
	e.clock.Advance(5 * time.Second)
	renewed, err := e.c.Extend(ctx, "k", lease.ID, 10*time.Second)
	if err != nil || !renewed.ExpiresAt.Equal(epoch.Add(16*time.Second)) {
		t.Fatalf("Extend = %+v, %v; want ExpiresAt +16s", renewed, err)
	}
	for _, tc := range []struct {
		token uint64
		want  bool
	}{{lease.Token, true}, {lease.Token + 1, false}} {
		if ok, err := e.c.ValidateToken(ctx, "k", tc.token); err != nil || ok != tc.want {
			t.Errorf("ValidateToken(%d) = %v, %v; want %v", tc.token, ok, err, tc.want)
		}
	}
	e.clock.Advance(11 * time.Second)
	if _, err := e.c.Extend(ctx, "k", lease.ID, time.Second); !errors.Is(err, fencing.ErrLeaseExpired) {
		t.Errorf("Extend after expiry: %v, want ErrLeaseExpired", err)
	}
}

func TestDefaultMargin(t *testing.T) {
	tests := []struct {
		name   string
		opts   []fencing.Option
		margin []time.Duration
		want   time.Duration
	}{
		{"default", nil, nil, fencing.DefaultMargin},
		{"WithDefaultMargin", []fencing.Option{fencing.WithDefaultMargin(5 * time.Second)}, nil, 5 * time.Second},
		{"WithDefaultMargin zero", []fencing.Option{fencing.WithDefaultMargin(0)}, nil, 0},
		{"explicit beats default", []fencing.Option{fencing.WithDefaultMargin(5 * time.Second)}, []time.Duration{2 * time.Second}, 2 * time.Second},
		{"explicit zero", nil, []time.Duration{0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.opts...)
			lease := e.grant(t, "k", 10*time.Second, tt.margin...)
			if lease.Margin != tt.want {
				t.Errorf("Grant: Margin = %v, want %v", lease.Margin, tt.want)
			}
			if want := epoch.Add(10*time.Second + tt.want); !lease.ExpiresAt.Equal(want) {
				t.Errorf("Grant: ExpiresAt = %v, want %v", lease.ExpiresAt, want)
			}
			e.clock.Advance(3 * time.Second)
			renewed, err := e.c.Renew(context.Background(), "k", lease.ID, 20*time.Second, tt.margin...)
			if err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if renewed.Margin != tt.want {
				t.Errorf("Renew: Margin = %v, want %v", renewed.Margin, tt.want)
			}
			if want := epoch.Add(23*time.Second + tt.want); !renewed.ExpiresAt.Equal(want) {
				t.Errorf("Renew: ExpiresAt = %v, want %v", renewed.ExpiresAt, want)
			}
		})
	}
}

// TestBadCoordinatorOption: each Coordinator option given a value it
// refuses is reported the same way (see fencing.Option): every call that
// takes or renews a lease fails before any request, whatever its own
// options, with ErrInvalidOption and the value's sentinel, naming the
// option; nothing changes.
func TestBadCoordinatorOption(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		opt      fencing.Option
		sentinel error
	}{
		{"WithDefaultMargin", fencing.WithDefaultMargin(-time.Second), fencing.ErrInvalidMargin},
		{"WithDefaultOwner", fencing.WithDefaultOwner("new\nline"), fencing.ErrInvalidOwner},
		{"WithDefaultLockDelay", fencing.WithDefaultLockDelay(-time.Second), fencing.ErrInvalidLockDelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			held := e.grant(t, "held", time.Minute)
			e.clock.Advance(time.Second)
			bad := fencing.New(e.mem, fencing.WithDefaultMargin(time.Second), tc.opt, fencing.WithDefaultMargin(2*time.Second))
			fn := func(context.Context, fencing.Lease) error {
				t.Errorf("Do ran fn")
				return nil
			}
			calls := map[string]func() error{
				"Grant":              func() error { _, err := bad.Grant(ctx, "k", time.Minute); return err },
				"Grant with margin":  func() error { _, err := bad.Grant(ctx, "k", time.Minute, time.Second); return err },
				"Acquire":            func() error { _, err := bad.Acquire(ctx, "k", time.Minute); return err },
				"Renew":              func() error { _, err := bad.Renew(ctx, "held", held.ID, time.Minute); return err },
				"Extend with margin": func() error { _, err := bad.Extend(ctx, "held", held.ID, time.Minute, 0); return err },
				"Hold":               func() error { _, err := bad.Hold(ctx, "k", time.Minute); return err },
				"Hold with options": func() error {
					_, err := bad.Hold(ctx, "k", time.Minute, fencing.WithMargin(time.Second), fencing.WithOwner("o"), fencing.WithLockDelay(0))
					return err
				},
				"Lock":            func() error { _, err := bad.Lock(ctx, "k", time.Minute); return err },
				"Lock with FIFO":  func() error { _, err := bad.Lock(ctx, "k", time.Minute, fencing.WithFIFO()); return err },
				"Do":              func() error { return bad.Do(ctx, "k", time.Minute, fn) },
				"Do with options": func() error { return bad.Do(ctx, "k", time.Minute, fn, fencing.WithMargin(0)) },
			}
			for call, f := range calls {
				err := f()
				if !errors.Is(err, fencing.ErrInvalidOption) || !errors.Is(err, tc.sentinel) || !strings.Contains(fmt.Sprint(err), tc.name) {
					t.Errorf("%s: %v, want an error wrapping ErrInvalidOption and %v that names %s", call, err, tc.sentinel, tc.name)
				}
			}
			if st, err := e.mem.Inspect(ctx, "held"); err != nil || st.ExpiresAt != held.ExpiresAt {
				t.Errorf("the held lease after the calls: %+v, %v; want it unrenewed, to expire at %v", st, err, held.ExpiresAt)
			}
			if _, live := e.token(t, "k"); live {
				t.Errorf("a refused call took the key")
			}
			e.wantNextToken(t, "k", 1) // no refused call used a token
			// The calls that take no lease work.
			if ok, err := bad.CheckToken(ctx, "held", held.Token); err != nil || !ok {
				t.Errorf("CheckToken: %v, %v; want true", ok, err)
			}
			if err := bad.Release(ctx, "held", held.ID); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}
}

func TestLeaseFields(t *testing.T) {
	e := newEnv(t)
	e.clock.Advance(time.Hour)
	const timeout = 30 * time.Second
	before := time.Now()
	lease := e.grant(t, "orders/42", timeout, 2*time.Second)
	after := time.Now()

	if lease.Key != "orders/42" {
		t.Errorf("Key = %q", lease.Key)
	}
	if lease.Token != 1 {
		t.Errorf("Token = %d, want 1", lease.Token)
	}
	if lease.TTL != timeout {
		t.Errorf("TTL = %v, want %v", lease.TTL, timeout)
	}
	if lease.Margin != 2*time.Second {
		t.Errorf("Margin = %v, want 2s", lease.Margin)
	}
	if want := epoch.Add(time.Hour + timeout + 2*time.Second); !lease.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want fake now + timeout + margin = %v", lease.ExpiresAt, want)
	}
	// Deadline is local: read before the request left, plus the timeout,
	// without the margin. It can only err on the early side.
	if lease.Deadline.Before(before.Add(timeout)) || lease.Deadline.After(after.Add(timeout)) {
		t.Errorf("Deadline = %v, want within [%v, %v]", lease.Deadline, before.Add(timeout), after.Add(timeout))
	}
	if !strings.Contains(lease.Deadline.String(), " m=") {
		t.Error("Deadline has no monotonic clock reading")
	}
	if r := lease.Remaining(); r <= 0 || r > timeout {
		t.Errorf("Remaining() = %v, want in (0, %v]", r, timeout)
	}
	if r := (fencing.Lease{Deadline: time.Now().Add(-time.Second)}).Remaining(); r != 0 {
		t.Errorf("Remaining() past Deadline = %v, want 0", r)
	}

	// A renew moves both clocks' ends and keeps the token.
	e.clock.Advance(10 * time.Second)
	before = time.Now()
	renewed, err := e.c.Renew(context.Background(), "orders/42", lease.ID, timeout)
	after = time.Now()
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if renewed.ID != lease.ID || renewed.Token != lease.Token || renewed.Key != lease.Key {
		t.Errorf("Renew changed identity: %+v -> %+v", lease, renewed)
	}
	if want := epoch.Add(time.Hour + 10*time.Second + timeout + fencing.DefaultMargin); !renewed.ExpiresAt.Equal(want) {
		t.Errorf("renewed ExpiresAt = %v, want %v", renewed.ExpiresAt, want)
	}
	if renewed.Deadline.Before(before.Add(timeout)) || renewed.Deadline.After(after.Add(timeout)) {
		t.Errorf("renewed Deadline = %v, want within [%v, %v]", renewed.Deadline, before.Add(timeout), after.Add(timeout))
	}
}

func TestDo(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	const timeout = time.Minute
	var got fencing.Lease
	err := e.c.Do(ctx, "job", timeout, func(ctx context.Context, lease fencing.Lease) error {
		got = lease
		deadline, ok := ctx.Deadline()
		if !ok || !deadline.Equal(lease.Deadline) {
			t.Errorf("fn's ctx deadline = %v, %v; want lease.Deadline %v", deadline, ok, lease.Deadline)
		}
		if lease.TTL != timeout || lease.Margin != fencing.DefaultMargin {
			t.Errorf("lease TTL, Margin = %v, %v; want %v, %v", lease.TTL, lease.Margin, timeout, fencing.DefaultMargin)
		}
		if ok, err := e.c.CheckToken(ctx, "job", lease.Token); err != nil || !ok {
			t.Errorf("CheckToken inside fn = %v, %v; want true, nil", ok, err)
		}
		if _, err := e.c.Grant(ctx, "job", time.Second); !errors.Is(err, fencing.ErrLeaseHeld) {
			t.Errorf("Grant inside fn: err = %v, want ErrLeaseHeld", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got.Token != 1 {
		t.Fatalf("fn got token %d, want 1", got.Token)
	}
	if _, live := e.token(t, "job"); live {
		t.Fatal("Do did not release the lease")
	}
	// Released, not merely expired: the lease's own ID now reads as released.
	if err := e.c.Release(ctx, "job", got.ID); err != nil {
		t.Errorf("Release after Do: %v, want nil (already released)", err)
	}
	e.wantNextToken(t, "job", 2)
}

func TestDoReturnsFnErrorAndReleases(t *testing.T) {
	errFn := errors.New("fn failed")
	e := newEnv(t)
	var id string
	err := e.c.Do(context.Background(), "job", time.Minute, func(_ context.Context, lease fencing.Lease) error {
		id = lease.ID
		return fmt.Errorf("writing: %w", errFn)
	})
	if !errors.Is(err, errFn) {
		t.Fatalf("Do: err = %v, want fn's error", err)
	}
	if _, live := e.token(t, "job"); live {
		t.Fatal("Do did not release the lease after fn failed")
	}
	if err := e.c.Release(context.Background(), "job", id); err != nil {
		t.Errorf("lease was not released by Do: %v", err)
	}
}

func TestDoReleasesWhenCtxCanceledInFn(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := e.c.Do(ctx, "job", time.Minute, func(ctx context.Context, _ fencing.Lease) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: err = %v, want context.Canceled", err)
	}
	if _, live := e.token(t, "job"); live {
		t.Fatal("Do did not release the lease after its context was canceled")
	}
}

func TestDoOverrunReportsExpiry(t *testing.T) {
	e := newEnv(t)
	err := e.c.Do(context.Background(), "job", 10*time.Second, func(context.Context, fencing.Lease) error {
		e.clock.Advance(11 * time.Second) // fn overran timeout + margin on the coordinator
		return nil
	})
	if !errors.Is(err, fencing.ErrLeaseExpired) {
		t.Fatalf("Do: err = %v, want ErrLeaseExpired", err)
	}
}

func TestDoGrantFails(t *testing.T) {
	e := newEnv(t)
	e.grant(t, "job", time.Minute)
	called := false
	err := e.c.Do(context.Background(), "job", time.Minute, func(context.Context, fencing.Lease) error {
		called = true
		return nil
	})
	if !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Errorf("Do on a held key: err = %v, want ErrLeaseHeld", err)
	}
	if called {
		t.Error("Do ran fn without a lease")
	}
	if err := e.c.Do(context.Background(), "", time.Minute, func(context.Context, fencing.Lease) error { return nil }); !errors.Is(err, fencing.ErrInvalidKey) {
		t.Errorf("Do with empty key: err = %v, want ErrInvalidKey", err)
	}
}

// lossy wraps a real backend and loses the response of its first few
// successful calls: the call takes effect, and the caller gets an error
// wrapping ErrOutcomeUnknown instead of the result.
type lossy struct {
	backend.Backend

	mu       sync.Mutex
	lose     int         // responses still to lose
	grantIDs []string    // lease ID of every Grant call
	grantAt  []time.Time // when each Grant call came
	renews   int
	releases int
}

var errLost = fmt.Errorf("test: response lost: %w", backend.ErrOutcomeUnknown)

func (l *lossy) loseResponse(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || l.lose == 0 {
		return false
	}
	l.lose--
	return true
}

func (l *lossy) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	l.mu.Lock()
	l.grantIDs = append(l.grantIDs, req.LeaseID)
	l.grantAt = append(l.grantAt, time.Now())
	l.mu.Unlock()
	lease, err := l.Backend.Grant(ctx, req)
	if l.loseResponse(err) {
		return backend.Lease{}, errLost
	}
	return lease, err
}

func (l *lossy) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	l.mu.Lock()
	l.renews++
	l.mu.Unlock()
	lease, err := l.Backend.Renew(ctx, req)
	if l.loseResponse(err) {
		return backend.Lease{}, errLost
	}
	return lease, err
}

func (l *lossy) Release(ctx context.Context, key, leaseID string) error {
	l.mu.Lock()
	l.releases++
	l.mu.Unlock()
	err := l.Backend.Release(ctx, key, leaseID)
	if l.loseResponse(err) {
		return errLost
	}
	return err
}

func newLossy(t *testing.T, lose int) (*lossy, *memorybackend.FakeClock) {
	t.Helper()
	clock := memorybackend.NewFakeClock(epoch)
	mem := memorybackend.New(memorybackend.WithClock(clock))
	t.Cleanup(func() { mem.Close() })
	return &lossy{Backend: mem, lose: lose}, clock
}

func TestOutcomeUnknownGrantIsResent(t *testing.T) {
	ctx := context.Background()
	l, _ := newLossy(t, 1)
	c := fencing.New(l)
	lease, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Grant after a lost response: %v", err)
	}
	if len(l.grantIDs) != 2 || l.grantIDs[0] != l.grantIDs[1] || l.grantIDs[0] != lease.ID {
		t.Fatalf("grant calls carried IDs %q, want the lease's ID %q twice", l.grantIDs, lease.ID)
	}
	if lease.Token != 1 {
		t.Errorf("Token = %d, want 1: the resend minted a second token", lease.Token)
	}
	if err := c.Release(ctx, "k", lease.ID); err != nil {
		t.Fatal(err)
	}
	next, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token != 2 {
		t.Errorf("next Token = %d, want 2", next.Token)
	}
}

func TestOutcomeUnknownRenewAndReleaseAreResent(t *testing.T) {
	ctx := context.Background()
	l, clock := newLossy(t, 0)
	c := fencing.New(l)
	lease, err := c.Grant(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second)
	l.lose = 1
	renewed, err := c.Renew(ctx, "k", lease.ID, 10*time.Second)
	if err != nil {
		t.Fatalf("Renew after a lost response: %v", err)
	}
	if l.renews != 2 || renewed.Token != lease.Token || !renewed.ExpiresAt.Equal(epoch.Add(16*time.Second)) {
		t.Errorf("renews = %d, renewed = %+v; want 2 calls, token %d, ExpiresAt +16s", l.renews, renewed, lease.Token)
	}
	l.lose = 1
	if err := c.Release(ctx, "k", lease.ID); err != nil {
		t.Fatalf("Release after a lost response: %v", err)
	}
	if l.releases != 2 {
		t.Errorf("releases = %d, want 2", l.releases)
	}
	if _, live, _ := c.Token(ctx, "k"); live {
		t.Error("lease still live after release")
	}
}

// takenAfterLostRelease loses the answer of the first Release, which went
// through, and lets another client take the key before the resend arrives.
type takenAfterLostRelease struct {
	backend.Backend
	lost bool
}

func (b *takenAfterLostRelease) Release(ctx context.Context, key, leaseID string) error {
	err := b.Backend.Release(ctx, key, leaseID)
	if err != nil || b.lost {
		return err
	}
	b.lost = true
	if _, err := fencing.New(b.Backend).Grant(ctx, key, time.Minute); err != nil {
		return err
	}
	return errLost
}

// A resent Release that finds another lease on the key reports the release
// done: the lost first attempt may have ended the lease, and the key has
// moved on either way.
func TestOutcomeUnknownReleaseResentAfterHandoff(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := fencing.New(&takenAfterLostRelease{Backend: e.mem})
	lease, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "k", lease.ID); err != nil {
		t.Fatalf("Release whose first answer was lost, the key taken since: %v, want nil", err)
	}
	if token, live, _ := c.Token(ctx, "k"); !live || token != lease.Token+1 {
		t.Fatalf("Token = %d, %v; want the next client's %d, live", token, live, lease.Token+1)
	}
	// Without a lost answer, a lease that is not the key's is still refused.
	if err := c.Release(ctx, "k", lease.ID); !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Fatalf("Release of a superseded lease = %v, want ErrLeaseNotFound", err)
	}
}

func TestOutcomeUnknownWithoutRetries(t *testing.T) {
	ctx := context.Background()
	l, _ := newLossy(t, 1)
	c := fencing.New(l, fencing.WithOutcomeRetries(0))
	_, err := c.Grant(ctx, "k", time.Minute)
	if !errors.Is(err, fencing.ErrOutcomeUnknown) {
		t.Fatalf("Grant: err = %v, want ErrOutcomeUnknown", err)
	}
	if len(l.grantIDs) != 1 {
		t.Errorf("grant sent %d times, want once", len(l.grantIDs))
	}
	// The lost grant did take effect: the key is held by token 1.
	if token, live, err := c.Token(ctx, "k"); err != nil || !live || token != 1 {
		t.Errorf("Token = %d, %v, %v; want 1, true, nil", token, live, err)
	}
}

func TestOutcomeUnknownRetriesExhausted(t *testing.T) {
	l, _ := newLossy(t, 100)
	c := fencing.New(l, fencing.WithOutcomeRetries(2))
	_, err := c.Grant(context.Background(), "k", time.Minute)
	if !errors.Is(err, fencing.ErrOutcomeUnknown) {
		t.Fatalf("Grant: err = %v, want ErrOutcomeUnknown", err)
	}
	if len(l.grantIDs) != 3 {
		t.Errorf("grant sent %d times, want 3 (1 + 2 retries)", len(l.grantIDs))
	}
	for _, id := range l.grantIDs {
		if id != l.grantIDs[0] {
			t.Fatalf("resends used different IDs: %q", l.grantIDs)
		}
	}
	if token, _, _ := c.Token(context.Background(), "k"); token != 1 {
		t.Errorf("Token = %d, want 1: resends minted more tokens", token)
	}
}

func TestOutcomeUnknownStopsWhenContextDone(t *testing.T) {
	l, _ := newLossy(t, 100)
	c := fencing.New(l, fencing.WithOutcomeRetries(1000))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A canceled context: the first call fails with ctx's error and nothing
	// is resent.
	if _, err := c.Grant(ctx, "k", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Grant: err = %v, want context.Canceled", err)
	}
	if n := len(l.grantIDs); n != 1 {
		t.Fatalf("grant with a canceled context sent %d times, want once", n)
	}
	// A context that ends during the backoff stops the retries.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// The first attempt took effect, so whatever ended the retries, the
	// outcome stays unknown.
	if _, err := c.Grant(ctx, "k2", time.Minute); !errors.Is(err, fencing.ErrOutcomeUnknown) {
		t.Fatalf("Grant: err = %v, want ErrOutcomeUnknown", err)
	}
	// Backoffs of 10, 20 and 40ms (sleeps are never shorter, however busy
	// the machine) leave room for at most 3 sends in 50ms, and 4 more in
	// 150ms; 1000 retries would take far longer.
	if n := len(l.grantIDs) - 1; n > 4 {
		t.Errorf("grant sent %d times in a 50ms context despite the context ending", n)
	}
}

// cancelOnResend loses the response of the first Grant, then cancels the
// caller's context while the resend is in flight, as a deadline that passes
// during a network round trip would.
type cancelOnResend struct {
	backend.Backend
	cancel context.CancelFunc
	calls  int
}

func (c *cancelOnResend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	c.calls++
	if c.calls > 1 {
		c.cancel()
	}
	lease, err := c.Backend.Grant(ctx, req)
	if c.calls == 1 && err == nil {
		return backend.Lease{}, errLost
	}
	return lease, err
}

// A resend that ends with the context's error has not settled the first
// attempt's outcome, so the error must still say the outcome is unknown.
func TestOutcomeUnknownSurvivesContextEndingDuringResend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(&cancelOnResend{Backend: mem, cancel: cancel})
	_, err := c.Grant(ctx, "k", time.Minute)
	if token, live, _ := mem.Token(context.Background(), "k"); !live || token != 1 {
		t.Fatalf("setup: the first grant did not take effect: %d, %v", token, live)
	}
	if !errors.Is(err, fencing.ErrOutcomeUnknown) {
		t.Fatalf("Grant returned %v, which hides that the first attempt's outcome is unknown (it took the key)", err)
	}
}

// closeOnResend loses the response of the first Grant, then finds the
// backend closed when the Coordinator resends.
type closeOnResend struct {
	backend.Backend
	calls int
}

func (c *closeOnResend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	c.calls++
	if c.calls == 1 {
		if _, err := c.Backend.Grant(ctx, req); err != nil {
			return backend.Lease{}, err
		}
		return backend.Lease{}, errLost
	}
	return backend.Lease{}, backend.ErrClosed
}

// A resend that finds the backend closed has not settled the first attempt
// either: the error says both.
func TestOutcomeUnknownSurvivesClosedBackendDuringResend(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(&closeOnResend{Backend: mem})
	_, err := c.Grant(context.Background(), "k", time.Minute)
	if !errors.Is(err, fencing.ErrOutcomeUnknown) || !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Grant returned %v, want an error wrapping ErrOutcomeUnknown and ErrClosed", err)
	}
	if token, live, _ := mem.Token(context.Background(), "k"); !live || token != 1 {
		t.Fatalf("the first grant did not take effect: %d, %v", token, live)
	}
}
