package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Cases for the lock delay (backend.Request.LockDelay): a lease that ends
// uncleanly (by expiry, or by ForceRelease) closes its key to grants for
// its delay; a release by the holder does not. On a fake clock (Traits.Now)
// the cases check the delay's ends to the nanosecond; on a real server a
// check that finds the key open proves a bug only when it returned before
// the earliest moment the delay could have ended, and the cases allow
// Traits.Slack more than the latest before they require the key open.

// clockRate allows for a server clock that runs a little fast against this
// process's, as inTime does.
const clockRate = 5 * time.Millisecond

// delayed returns a lease's timeout and margin, and a lock delay, for cases
// that let a lease expire and then wait out its delay. On a real server the
// delay outlasts the lease and Slack, so that a busy machine still finds the
// key closed after it saw the lease end, and it is a whole number of
// MinTTLs, so a backend that keeps time in MinTTL's unit (etcd: seconds)
// need not round it.
func (s suite) delayed() (timeout, margin, delay time.Duration) {
	timeout, margin = s.short()
	if s.traits.Now != nil {
		return timeout, margin, 5 * time.Second
	}
	delay = max(s.traits.MinTTL, time.Second) + s.traits.Slack
	if unit := s.traits.MinTTL; unit > 0 {
		delay = (delay + unit - 1) / unit * unit
	}
	return timeout, margin, delay
}

// delayWindow is what a case knows of a lock delay's end. On a fake clock
// end is exactly the end, on the coordinator's clock. On a real server the
// delay ends no earlier than earliest and no later than latest, on this
// process's clock, and a refused grant has at most most left.
type delayWindow struct {
	end              time.Time
	earliest, latest time.Time
	most             time.Duration
}

// afterExpiry is the window of the delay of lease, granted with delay by a
// request sent at sent that returned at returned.
func (s suite) afterExpiry(lease backend.Lease, delay time.Duration, sent, returned time.Time) delayWindow {
	if s.traits.Now != nil {
		return delayWindow{end: lease.ExpiresAt.Add(delay)}
	}
	full := lease.TTL + lease.Margin
	return delayWindow{
		earliest: sent.Add(full + delay),
		latest:   returned.Add(full + s.traits.Slack + delay + s.traits.Slack),
		most:     delay + s.traits.Slack,
	}
}

// inDelay reports whether a request about w's key that returned (just now)
// was certainly processed before w's delay could have ended. Later, a busy
// machine that stalled the test explains an open key, and inDelay says so in
// the log. On a fake clock it is true before the end.
func (s suite) inDelay(t *testing.T, w delayWindow) bool {
	t.Helper()
	if s.traits.Now != nil {
		return s.traits.Now().Before(w.end)
	}
	if left := time.Until(w.earliest); left < clockRate {
		t.Logf("a check of a lock delay returned %v after the delay could have ended: too late to tell on this machine", -left)
		return false
	}
	return true
}

// grantAfter grants key (through c, for long) once w's delay is over: at
// its end on a fake clock; on a real server by trying from its earliest end,
// a short while apart, until its latest (which waiting for the latest alone
// would make the slowest case of the suite on a server of coarse time).
func (s suite) grantAfter(t *testing.T, c *fencing.Coordinator, key string, w delayWindow) fencing.Lease {
	t.Helper()
	if now := s.traits.Now; now != nil {
		s.wait(t, max(w.end.Sub(now()), 0))
		return s.grant(t, c, key, long, time.Second)
	}
	s.wait(t, max(time.Until(w.earliest), 0))
	for {
		lease, err := c.Grant(context.Background(), key, long, time.Second)
		if err == nil {
			return lease
		}
		if !errors.Is(err, fencing.ErrLeaseHeld) {
			t.Fatalf("Grant(%q) at the end of a lock delay: %v", key, err)
		}
		if time.Now().After(w.latest) {
			t.Fatalf("Grant(%q) still refused %v after the lock delay's latest end: %v", key, time.Since(w.latest), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// delayGrant is a grant request by a newcomer: a lease ID no earlier case
// used.
func delayGrant(key, id string) backend.Request {
	return backend.Request{Key: key, LeaseID: id, Timeout: long, Margin: time.Second}
}

// wantDelayed fails unless a grant on key by a newcomer is refused with a
// *backend.HeldError that says the key is in a lock delay with w's time
// left: exactly, on a fake clock; on a real server more than zero, at most
// w.most and at least what is left until w.earliest. No lease on key may be
// live. It reports false, having logged why, when a real server's delay may
// have ended before the check (the grant may then have succeeded: the case
// must stop).
func (s suite) wantDelayed(t *testing.T, b backend.Backend, key, id string, w delayWindow) bool {
	t.Helper()
	_, err := b.Grant(context.Background(), delayGrant(key, id))
	returned := time.Now()
	var held *backend.HeldError
	if err == nil || !errors.As(err, &held) {
		if err == nil && !s.inDelay(t, w) {
			return false
		}
		t.Fatalf("Grant during a lock delay: %v, want a *backend.HeldError with Delayed", err)
	}
	if !held.Delayed {
		t.Fatalf("Grant during a lock delay: %v (%+v), want HeldError.Delayed: no lease is live", err, *held)
	}
	if now := s.traits.Now; now != nil {
		if want := w.end.Sub(now()); held.Remaining != want {
			t.Fatalf("HeldError.Remaining = %v during a lock delay, want exactly the delay's time left, %v", held.Remaining, want)
		}
		return true
	}
	least := w.earliest.Sub(returned) - clockRate
	if held.Remaining <= 0 || held.Remaining > w.most || held.Remaining < least {
		t.Fatalf("HeldError.Remaining = %v during a lock delay, want in [%v, %v]: the delay's time left", held.Remaining, max(least, 0), w.most)
	}
	return true
}

// wantInspectDelayed fails, when b is an Inspector, unless Inspect shows key
// not live, in a lock delay with w's time left, and with maxToken as its
// highest token. It reports false as wantDelayed does.
func (s suite) wantInspectDelayed(t *testing.T, b backend.Backend, key string, maxToken uint64, w delayWindow) bool {
	t.Helper()
	i, ok := b.(backend.Inspector)
	if !ok {
		return true
	}
	st, err := i.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	returned := time.Now()
	if now := s.traits.Now; now != nil {
		want := backend.KeyState{MaxToken: maxToken, DelayRemaining: w.end.Sub(now())}
		got := st
		got.DelayedUntil = time.Time{}
		if got != want || !st.DelayedUntil.Equal(w.end) {
			t.Fatalf("Inspect during a lock delay = %+v, want %+v with DelayedUntil %v", st, want, w.end)
		}
		return true
	}
	if st.Live || st.Token != 0 || st.Owner != "" || st.LockDelay != 0 || st.MaxToken != maxToken {
		t.Fatalf("Inspect during a lock delay = %+v, want not live, no token, owner or lock delay, and max token %d", st, maxToken)
	}
	if st.DelayedUntil.IsZero() && st.DelayRemaining == 0 && !s.inDelay(t, w) {
		return false
	}
	least := w.earliest.Sub(returned) - clockRate
	if st.DelayedUntil.IsZero() || st.DelayRemaining <= 0 || st.DelayRemaining > w.most || st.DelayRemaining < least {
		t.Fatalf("Inspect during a lock delay = %+v, want DelayedUntil set and DelayRemaining in [%v, %v]", st, max(least, 0), w.most)
	}
	return true
}

// grantDelayed grants key to id with timeout, margin and delay, and returns
// the lease and when the request was sent and returned.
func grantDelayed(t *testing.T, b backend.Backend, key, id string, timeout, margin, delay time.Duration) (backend.Lease, time.Time, time.Time) {
	t.Helper()
	sent := time.Now()
	lease, err := b.Grant(context.Background(), backend.Request{Key: key, LeaseID: id, Timeout: timeout, Margin: margin, LockDelay: delay})
	if err != nil {
		t.Fatalf("Grant(%q) with lock delay %v: %v", key, delay, err)
	}
	return lease, sent, time.Now()
}

// waitEnded waits until lease, granted by a request sent at sent, has
// expired on a real server (polling Token from the earliest moment it can
// have, up to the latest plus Slack), or exactly its end on a fake clock.
// Polling, rather than waiting for the latest, leaves the most of the lock
// delay for the checks that follow.
func (s suite) waitEnded(t *testing.T, c *fencing.Coordinator, lease backend.Lease, sent, returned time.Time) {
	t.Helper()
	full := lease.TTL + lease.Margin
	if now := s.traits.Now; now != nil {
		s.wait(t, max(lease.ExpiresAt.Sub(now()), 0))
		wantFree(t, c, lease.Key)
		return
	}
	s.wait(t, max(time.Until(sent.Add(full)), 0))
	latest := returned.Add(full + s.traits.Slack)
	for {
		_, live, err := c.Token(context.Background(), lease.Key)
		if err != nil {
			t.Fatalf("Token(%q): %v", lease.Key, err)
		}
		if !live {
			return
		}
		if time.Now().After(latest) {
			t.Fatalf("lease %d on %q still live %v after its TTL + margin + Slack", lease.Token, lease.Key, time.Since(returned.Add(full)))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// testLockDelayAfterExpiry: a lease with a lock delay that expires closes
// its key until expiresAt + delay; meanwhile its token is not live, its
// holder's renewals and release get ErrLeaseExpired (and open nothing), a
// resent grant of it gets ErrLeaseExpired, Inspect shows the delay; after
// it, a grant gets a larger token.
func (s suite) testLockDelayAfterExpiry(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	ctx := context.Background()
	const key = "delay-expiry"
	timeout, margin, delay := s.delayed()
	req := backend.Request{Key: key, LeaseID: "delay-expiry-1", Timeout: timeout, Margin: margin, LockDelay: delay}
	lease, sent, returned := grantDelayed(t, b, key, req.LeaseID, timeout, margin, delay)
	w := s.afterExpiry(lease, delay, sent, returned)
	if s.traits.Now != nil {
		// The lease's last nanosecond: live, and a refusal counts its
		// delay in.
		s.wait(t, timeout+margin-time.Nanosecond)
		_, err := b.Grant(ctx, delayGrant(key, "delay-expiry-early"))
		var held *backend.HeldError
		if !errors.As(err, &held) || held.Delayed || (held.Remaining != 0 && held.Remaining != time.Nanosecond+delay) {
			t.Fatalf("Grant 1ns before the end of a lease with lock delay %v: %v, want a *backend.HeldError, not Delayed, with 1ns + the delay (or 0, unknown) left", delay, err)
		}
	}
	s.waitEnded(t, c, lease, sent, returned)
	if !s.wantDelayed(t, b, key, "delay-expiry-2", w) {
		return
	}
	wantFree(t, c, key)
	wantCheck(t, c, key, lease.Token, false)
	_, err := c.Renew(ctx, key, req.LeaseID, timeout, margin)
	wantErr(t, "Renew during the lock delay", err, fencing.ErrLeaseExpired)
	wantErr(t, "Release during the lock delay", c.Release(ctx, key, req.LeaseID), fencing.ErrLeaseExpired)
	_, err = b.Grant(ctx, req)
	wantErr(t, "Grant resent during the lock delay", err, backend.ErrLeaseExpired)
	if !s.wantInspectDelayed(t, b, key, lease.Token, w) || !s.wantDelayed(t, b, key, "delay-expiry-3", w) {
		return
	}
	if s.traits.Now != nil {
		// The delay's last nanosecond: still closed; its end: open.
		s.wait(t, w.end.Sub(s.traits.Now())-time.Nanosecond)
		s.wantDelayed(t, b, key, "delay-expiry-4", w)
		s.wantInspectDelayed(t, b, key, lease.Token, w)
	}
	if i, ok := b.(backend.Inspector); ok && s.traits.Now != nil {
		s.wait(t, time.Nanosecond)
		if st, err := i.Inspect(ctx, key); err != nil || st != (backend.KeyState{MaxToken: lease.Token}) {
			t.Fatalf("Inspect at the end of the lock delay = %+v, %v; want only MaxToken %d", st, err, lease.Token)
		}
	}
	next := s.grantAfter(t, c, key, w)
	s.wantNext(t, "grant after the lock delay", lease.Token, next.Token)
	wantLive(t, c, key, next.Token)
}

// testLockDelayOfLiveLease: a live lease's delay is stored with it and kept
// by renewals (whatever delay they carry); Inspect and List report it; a
// grant refused while the lease is live counts the delay in Remaining.
func (s suite) testLockDelayOfLiveLease(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	ctx := context.Background()
	const key = "delay-live"
	const delay = 10 * time.Second
	req := backend.Request{Key: key, LeaseID: "delay-live-1", Timeout: long, Margin: time.Second, LockDelay: delay}
	lease, _, _ := grantDelayed(t, b, key, req.LeaseID, long, time.Second, delay)
	full := lease.TTL + lease.Margin
	_, err := b.Grant(ctx, delayGrant(key, "delay-live-2"))
	var held *backend.HeldError
	if !errors.As(err, &held) || held.Delayed {
		t.Fatalf("Grant on a live lease with a lock delay: %v, want a *backend.HeldError, not Delayed", err)
	}
	if s.traits.Now != nil && held.Remaining != 0 && held.Remaining != full+delay {
		t.Fatalf("HeldError.Remaining = %v, want the lease's %v + its lock delay %v (or 0, unknown)", held.Remaining, full, delay)
	}
	if held.Remaining != 0 && (held.Remaining <= delay || held.Remaining > full+delay+s.traits.Slack || held.Remaining < full+delay-10*time.Second) {
		t.Fatalf("HeldError.Remaining = %v, want about the lease's %v + its lock delay %v", held.Remaining, full, delay)
	}
	// Renewals keep the grant's delay, whatever theirs says.
	for _, d := range []time.Duration{0, time.Second} {
		r := req
		r.LockDelay = d
		if _, err := b.Renew(ctx, r); err != nil {
			t.Fatalf("Renew with lock delay %v: %v", d, err)
		}
	}
	r := req
	r.Timeout = long + time.Second // etcd: a renewal to a new etcd lease rewrites the record
	if _, err := b.Renew(ctx, r); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	wantLive(t, c, key, lease.Token)
	if i, ok := b.(backend.Inspector); ok {
		st, err := i.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if !st.Live || st.Token != lease.Token || st.LockDelay != delay || !st.DelayedUntil.IsZero() || st.DelayRemaining != 0 {
			t.Fatalf("Inspect of a live lease with lock delay %v after renewals = %+v, want live, token %d, LockDelay %v and no DelayedUntil", delay, st, lease.Token, delay)
		}
	}
	if l, ok := b.(backend.Lister); ok {
		if _, err := b.Grant(ctx, backend.Request{Key: key + "/none", LeaseID: "delay-live-none", Timeout: long}); err != nil {
			t.Fatalf("Grant: %v", err)
		}
		page, _, err := l.List(ctx, key, "", 10)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		got := map[string]time.Duration{}
		for _, ki := range page {
			got[ki.Key] = ki.State.LockDelay
		}
		if d, ok := got[key]; !ok || d != delay || got[key+"/none"] != 0 || len(got) != 2 {
			t.Fatalf("List lock delays = %v, want %q: %v and %q: 0", got, key, delay, key+"/none")
		}
	}
	if s.traits.Now != nil {
		// The renewals kept the delay: the lease's expiry starts it.
		s.wait(t, r.Timeout+r.Margin)
		s.wantDelayed(t, b, key, "delay-live-3", delayWindow{end: s.traits.Now().Add(delay)})
	}
}

// testNoLockDelayAfterRelease: a release by the holder leaves no delay,
// whatever the lease's; the delay belongs to the lease, not the key, so a
// later lease without one that expires leaves none either.
func (s suite) testNoLockDelayAfterRelease(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	ctx := context.Background()
	const key = "delay-release"
	lease, _, _ := grantDelayed(t, b, key, "delay-release-1", long, time.Second, backend.MaxLockDelay)
	if err := c.Release(ctx, key, lease.LeaseID); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	if i, ok := b.(backend.Inspector); ok {
		if st, err := i.Inspect(ctx, key); err != nil || st != (backend.KeyState{MaxToken: lease.Token}) {
			t.Fatalf("Inspect after a release = %+v, %v; want only MaxToken %d (no lock delay)", st, err, lease.Token)
		}
	}
	next := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant right after a release", lease.Token, next.Token)
	if err := c.Release(ctx, key, next.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// A lease without a delay, after one with a delay, expires into a free key.
	plain, returned := s.grantShort(t, c, key)
	s.waitExpired(t, plain, returned)
	wantFree(t, c, key)
	after := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after a lease without a lock delay expired", plain.Token, after.Token)
}

// testLockDelayAfterForceRelease: a forced release ends the lease at once and
// starts its delay then; the old holder's calls open nothing, and a second
// forced release during the delay ends nothing and does not restart it.
func (s suite) testLockDelayAfterForceRelease(t *testing.T) {
	b := s.backend(t)
	f := capability[backend.ForceReleaser](t, b, "backend.ForceReleaser")
	c := fencing.New(b)
	ctx := context.Background()
	const key = "delay-force"
	_, _, delay := s.delayed()
	req := backend.Request{Key: key, LeaseID: "delay-force-1", Timeout: long, Margin: time.Second, LockDelay: delay}
	lease, _, _ := grantDelayed(t, b, key, req.LeaseID, long, time.Second, delay)
	if s.traits.Now != nil {
		s.wait(t, time.Second) // the delay runs from the release, not the grant
	}
	sent := time.Now()
	if ended, err := f.ForceRelease(ctx, key); err != nil || !ended {
		t.Fatalf("ForceRelease of a live lease with a lock delay = %v, %v; want true, nil", ended, err)
	}
	w := delayWindow{earliest: sent.Add(delay), latest: time.Now().Add(delay + s.traits.Slack), most: delay + s.traits.Slack}
	if now := s.traits.Now; now != nil {
		w = delayWindow{end: now().Add(delay)}
	}
	if !s.wantDelayed(t, b, key, "delay-force-2", w) {
		return
	}
	wantFree(t, c, key)
	wantCheck(t, c, key, lease.Token, false)
	_, err := c.Renew(ctx, key, req.LeaseID, long)
	wantErr(t, "Renew after a forced release, during its lock delay", err, fencing.ErrLeaseNotFound)
	// The old holder's release (nil or ErrLeaseNotFound, as the backend
	// documents) and a resent grant are not a release by the holder: the
	// delay stays.
	_ = c.Release(ctx, key, req.LeaseID)
	if _, err := b.Grant(ctx, req); err == nil {
		t.Fatalf("Grant resent after a forced release succeeded, want an error")
	}
	if s.traits.Now != nil {
		s.wait(t, delay/2)
	}
	if ended, err := f.ForceRelease(ctx, key); err != nil || ended {
		t.Fatalf("ForceRelease during a lock delay = %v, %v; want false, nil", ended, err)
	}
	if !s.wantInspectDelayed(t, b, key, lease.Token, w) || !s.wantDelayed(t, b, key, "delay-force-3", w) {
		return
	}
	if s.traits.Now != nil {
		s.wait(t, w.end.Sub(s.traits.Now())-time.Nanosecond)
		s.wantDelayed(t, b, key, "delay-force-4", w)
	}
	next := s.grantAfter(t, c, key, w)
	s.wantNext(t, "grant after a forced release's lock delay", lease.Token, next.Token)
	if ended, err := f.ForceRelease(ctx, key); err != nil || !ended {
		t.Fatalf("ForceRelease of a lease without a lock delay = %v, %v; want true, nil", ended, err)
	}
	after := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant right after forcing out a lease without a lock delay", next.Token, after.Token)
}

// testLockDelayLongerThanLease: a delay many times the lease's length holds
// for all of it, well after any record that lived as long as the lease
// would have gone.
func (s suite) testLockDelayLongerThanLease(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	const key = "delay-longer"
	if s.traits.Now != nil {
		lease, _, _ := grantDelayed(t, b, key, "delay-longer-1", backend.MinTimeout, 0, backend.MaxLockDelay)
		w := delayWindow{end: lease.ExpiresAt.Add(backend.MaxLockDelay)}
		s.wait(t, backend.MinTimeout)
		s.wantDelayed(t, b, key, "delay-longer-2", w)
		s.wait(t, backend.MaxLockDelay-time.Nanosecond)
		s.wantDelayed(t, b, key, "delay-longer-3", w)
		s.wantInspectDelayed(t, b, key, lease.Token, w)
		s.wait(t, time.Nanosecond)
		next := s.grant(t, c, key, long, time.Second)
		s.wantNext(t, "grant after a lock delay 60000 times the lease", lease.Token, next.Token)
		return
	}
	timeout, margin, delay := s.delayed()
	delay *= 2
	lease, sent, returned := grantDelayed(t, b, key, "delay-longer-1", timeout, margin, delay)
	w := s.afterExpiry(lease, delay, sent, returned)
	// Past the lease's latest end by a quarter of the delay.
	s.wait(t, max(time.Until(returned.Add(lease.TTL+lease.Margin+s.traits.Slack+delay/4)), 0))
	wantFree(t, c, key)
	if s.wantDelayed(t, b, key, "delay-longer-2", w) {
		s.wantInspectDelayed(t, b, key, lease.Token, w)
	}
}

// testLockDelayCap: MaxLockDelay is accepted, a nanosecond more is not.
func (s suite) testLockDelayCap(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	ctx := context.Background()
	const key = "delay-cap"
	lease, _, _ := grantDelayed(t, b, key, "delay-cap-1", long, time.Second, backend.MaxLockDelay)
	if i, ok := b.(backend.Inspector); ok {
		if st, err := i.Inspect(ctx, key); err != nil || st.LockDelay != backend.MaxLockDelay {
			t.Fatalf("Inspect = %+v, %v; want LockDelay %v", st, err, backend.MaxLockDelay)
		}
	}
	if err := c.Release(ctx, key, lease.LeaseID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	req := backend.Request{Key: key, LeaseID: "delay-cap-2", Timeout: long, LockDelay: backend.MaxLockDelay + time.Nanosecond}
	_, err := b.Grant(ctx, req)
	wantErr(t, fmt.Sprintf("Grant with lock delay %v", req.LockDelay), err, backend.ErrInvalidLockDelay)
	next := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after one over the cap", lease.Token, next.Token)
}

// testLockDelayBadValues: a negative delay or one over the cap gets
// ErrInvalidLockDelay and changes nothing: a free key stays never leased, a
// held one keeps its holder, and the next tokens are the ones the backend
// would have minted anyway.
func (s suite) testLockDelayBadValues(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	ctx := context.Background()
	held := s.grant(t, c, "delay-bad-held", long, time.Second)
	released := s.grant(t, c, "delay-bad-released", long, time.Second)
	if err := c.Release(ctx, "delay-bad-released", released.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	bad := []time.Duration{-time.Nanosecond, -time.Second, math.MinInt64, backend.MaxLockDelay + time.Nanosecond, 2 * backend.MaxLockDelay, math.MaxInt64}
	for n, d := range bad {
		for _, key := range []string{"delay-bad-fresh", "delay-bad-held", "delay-bad-released"} {
			req := backend.Request{Key: key, LeaseID: fmt.Sprintf("delay-bad-%d", n), Timeout: long, Margin: time.Second, LockDelay: d}
			_, err := b.Grant(ctx, req)
			wantErr(t, fmt.Sprintf("Grant of %q with lock delay %v", key, d), err, backend.ErrInvalidLockDelay)
		}
	}
	if i, ok := b.(backend.Inspector); ok {
		if st, err := i.Inspect(ctx, "delay-bad-fresh"); err != nil || st != (backend.KeyState{}) {
			t.Fatalf("Inspect after grants with bad lock delays = %+v, %v; want the zero KeyState (never leased)", st, err)
		}
	}
	wantFree(t, c, "delay-bad-fresh")
	wantFree(t, c, "delay-bad-released")
	wantLive(t, c, "delay-bad-held", held.Token)
	first := s.grant(t, c, "delay-bad-fresh", long, time.Second)
	if s.traits.DenseTokens && first.Token != 1 {
		t.Fatalf("first token on a key after grants with bad lock delays = %d, want 1", first.Token)
	}
	next := s.grant(t, c, "delay-bad-released", long, time.Second)
	s.wantNext(t, "grant after grants with bad lock delays", released.Token, next.Token)
	if err := c.Release(ctx, "delay-bad-held", held.ID); err != nil {
		t.Fatalf("Release by the holder after grants with bad lock delays: %v", err)
	}
}

// testLockWaitsOutLockDelay: through package fencing, a lease of a
// Coordinator with WithDefaultLockDelay that expires keeps Lock waiting
// until the delay is over, and no longer: the Delayed refusals' Remaining
// is what the waiter sleeps, so one that is too short or too long shows
// here. How late is judged on the waiter's own grant attempts against
// reference timers (checkPrompt), not on when Lock returned, which a busy
// machine or a slow round trip delays. Hold with WithLockDelay stores
// the delay; its holder's release leaves none.
func (s suite) testLockWaitsOutLockDelay(t *testing.T) {
	b := s.backend(t)
	ctx := context.Background()
	const key = "delay-lock"
	timeout, margin, delay := s.delayed()
	c := fencing.New(b, fencing.WithDefaultLockDelay(delay))
	sent := time.Now()
	crashed := s.grant(t, c, key, timeout, margin) // a holder that never renews nor releases
	returned := time.Now()
	w := s.afterExpiry(backend.Lease{TTL: crashed.TTL, Margin: crashed.Margin, ExpiresAt: crashed.ExpiresAt}, delay, sent, returned)
	type result struct {
		h   *fencing.Held
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	// The waiter's own attempts, and reference timers (see checkPrompt).
	attempts := &grantLog{}
	var lb backend.Backend = &grantLogger{Backend: b, log: attempts}
	if n, ok := b.(backend.Notifier); ok {
		lb = grantLoggerNotifier{lb.(*grantLogger), n}
	}
	lc := fencing.New(lb, fencing.WithDefaultLockDelay(delay))
	if s.traits.Now == nil {
		attempts.armLatest(w.latest)
	}
	if now := s.traits.Now; now != nil {
		// The fake clock moves only when told: the waiter arrives in the
		// delay's last millisecond, sleeps it out (in real time) and finds
		// the key open once the clock has moved on.
		s.wait(t, w.end.Sub(now())-time.Millisecond)
	}
	go func() {
		h, err := lc.Lock(ctx, key, long, fencing.WithMargin(time.Second), fencing.WithPollInterval(fencing.MinPollInterval))
		got <- result{h, err, time.Now()}
	}()
	if s.traits.Now != nil {
		time.Sleep(20 * time.Millisecond)
		s.wait(t, time.Millisecond)
	}
	var r result
	giveUp := 10 * time.Second
	if s.traits.Now == nil {
		giveUp += time.Until(w.latest)
	}
	select {
	case r = <-got:
	case <-time.After(giveUp):
		t.Fatalf("Lock still waiting 10s after the lock delay's latest end")
	}
	if r.err != nil {
		t.Fatalf("Lock after a lease with a lock delay expired: %v", r.err)
	}
	defer r.h.Release(ctx)
	s.wantNext(t, "Lock after a lock delay", crashed.Token, r.h.Token())
	if s.traits.Now == nil {
		if r.at.Before(w.earliest.Add(-clockRate)) {
			t.Fatalf("Lock got the key %v before the lock delay could have ended", w.earliest.Sub(r.at))
		}
		t.Logf("Lock got the key %v after the %v lock delay's earliest end (its latest is %v later)", r.at.Sub(w.earliest), delay, w.latest.Sub(w.earliest))
		attempts.checkPrompt(t, w)
	}
	if i, ok := b.(backend.Inspector); ok {
		if st, err := i.Inspect(ctx, key); err != nil || st.LockDelay != delay {
			t.Fatalf("Inspect of Lock's lease = %+v, %v; want the Coordinator's default LockDelay %v", st, err, delay)
		}
	}
	if err := r.h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Hold's own delay, and no delay after its holder's release.
	h, err := c.Hold(ctx, key, long, fencing.WithMargin(time.Second), fencing.WithLockDelay(backend.MaxLockDelay))
	if err != nil {
		t.Fatalf("Hold with WithLockDelay: %v", err)
	}
	if i, ok := b.(backend.Inspector); ok {
		if st, err := i.Inspect(ctx, key); err != nil || st.LockDelay != backend.MaxLockDelay {
			t.Fatalf("Inspect of a Hold with WithLockDelay(%v) = %+v, %v", backend.MaxLockDelay, st, err)
		}
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Held.Release: %v", err)
	}
	next := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant right after Held.Release", h.Token(), next.Token)
}

// lateTimer is how much later than a reference timer, armed for the same
// instant, the waiter may send its attempt: the two wake on one busy
// machine, so its load delays both alike (as in package heldtest).
const lateTimer = 50 * time.Millisecond

// grantAttempt is one Grant sent through a grantLogger: when it was sent and
// answered, its error, and for a refusal during a lock delay when a
// reference timer armed at its answer for the Remaining it told fired.
type grantAttempt struct {
	call, ret time.Time
	err       error
	delayed   bool      // refused during a lock delay
	fired     time.Time // zero until then, and for other answers
}

// grantLog records a waiter's grant attempts, and the firing of a
// reference timer armed for the latest end of a lock delay.
type grantLog struct {
	mu       sync.Mutex
	attempts []*grantAttempt
	latest   time.Time // when the timer armed for the latest end fired
}

func (g *grantLog) armLatest(at time.Time) {
	time.AfterFunc(time.Until(at), func() {
		g.mu.Lock()
		g.latest = time.Now()
		g.mu.Unlock()
	})
}

// checkPrompt fails t unless the waiter sent its successful attempt
// promptly once w's delay was over: its refusals during the delay told an
// end within w, and it sent the attempt that got the key no later than
// lateTimer after the later of a timer armed for w's latest end and one
// armed, at the answer of the refusal before it, for the time left that
// refusal told (which the waiter sleeps exactly). A waiter that sleeps a
// fixed poll, or longer than the time left, or a backend that tells more
// time left than the delay has, or refuses after it, fails here; the
// round trip of the attempt and the load's timer latency do not count.
func (g *grantLog) checkPrompt(t *testing.T, w delayWindow) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		ready := !g.latest.IsZero()
		if n := len(g.attempts); n > 1 && g.attempts[n-2].delayed && g.attempts[n-2].fired.IsZero() {
			ready = false // the refusal's reference timer is still to fire
		}
		g.mu.Unlock()
		if ready || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.latest.IsZero() {
		t.Fatalf("the reference timer for the lock delay's latest end %v never fired", w.latest)
	}
	n := len(g.attempts)
	if n == 0 || g.attempts[n-1].err != nil {
		t.Fatalf("Lock got the key, but its last of %d grant attempts did not", n)
	}
	for _, a := range g.attempts {
		var held *backend.HeldError
		if errors.As(a.err, &held) && held.Delayed {
			if end := a.call.Add(held.Remaining); end.After(w.latest.Add(clockRate)) {
				t.Fatalf("a grant refused during the lock delay, sent %v before its latest end, told %v left: the delay ends %v after its latest end",
					w.latest.Sub(a.call), held.Remaining, end.Sub(w.latest))
			}
		}
	}
	due, why := g.latest, "a timer armed for the lock delay's latest end fired"
	if n > 1 {
		if prev := g.attempts[n-2]; prev.fired.After(due) {
			due, why = prev.fired, "a timer armed for the time left its last refusal told fired"
		}
	}
	success := g.attempts[n-1]
	t.Logf("Lock's successful grant attempt was sent %v after %s (%v after the latest end); it took %v", success.call.Sub(due), why, success.call.Sub(w.latest), success.ret.Sub(success.call))
	if late := success.call.Sub(due); late > lateTimer {
		t.Fatalf("Lock sent the grant that got the key %v after %s: it slept more than the delay's time left", late, why)
	}
}

// grantLogger is a backend whose Grants a grantLog records; it arms the
// reference timer of each refusal during a lock delay.
type grantLogger struct {
	backend.Backend
	log *grantLog
}

func (b *grantLogger) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	a := &grantAttempt{call: time.Now()}
	l, err := b.Backend.Grant(ctx, req)
	a.ret, a.err = time.Now(), err
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	var held *backend.HeldError
	if a.delayed = errors.As(err, &held) && held.Delayed; a.delayed {
		time.AfterFunc(held.Remaining, func() {
			b.log.mu.Lock()
			a.fired = time.Now()
			b.log.mu.Unlock()
		})
	}
	b.log.attempts = append(b.log.attempts, a)
	return l, err
}

// grantLoggerNotifier is a grantLogger of a backend.Notifier.
type grantLoggerNotifier struct {
	*grantLogger
	n backend.Notifier
}

func (b grantLoggerNotifier) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	return b.n.NotifyFree(ctx, key)
}
