package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Cases for the optional capabilities of package backend. Each runs only
// when the backend implements the capability, and skips with a message
// otherwise (as fstest.TestFS checks optional interfaces).

// capability returns b as a T, or skips the test.
func capability[T any](t *testing.T, b backend.Backend, name string) T {
	t.Helper()
	v, ok := b.(T)
	if !ok {
		t.Skipf("optional capability: the backend does not implement %s", name)
	}
	return v
}

// testVerdictsAreBare: a verdict comes back as the sentinel alone (a
// *HeldError for a refused grant), so every backend words it alike, and
// never names the key (package fencing does, once).
func (s suite) testVerdictsAreBare(t *testing.T) {
	b := s.backend(t)
	ctx := context.Background()
	const key = "verdict-key-name"
	timeout, margin := s.short()
	req := backend.Request{Key: key, LeaseID: "holder-1", Timeout: long, Margin: time.Second}
	if _, err := b.Grant(ctx, req); err != nil {
		t.Fatalf("Grant: %v", err)
	}
	_, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: "holder-2", Timeout: long, Margin: time.Second})
	var held *backend.HeldError
	if !errors.As(err, &held) || !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("Grant on a held key: %v (%T), want a *backend.HeldError", err, err)
	}
	if held.Remaining < 0 || held.Remaining > long+time.Second {
		t.Fatalf("HeldError.Remaining = %v, want 0 (unknown) or at most the lease's %v", held.Remaining, long+time.Second)
	}
	wantBare := func(what string, err, sentinel error) {
		t.Helper()
		if err == nil || err.Error() != sentinel.Error() {
			t.Fatalf("%s: error %q, want exactly %q", what, err, sentinel)
		}
	}
	_, err = b.Renew(ctx, backend.Request{Key: key, LeaseID: "stranger", Timeout: long, Margin: time.Second})
	wantBare("Renew by a stranger", err, backend.ErrLeaseNotFound)
	wantBare("Release by a stranger", b.Release(ctx, key, "stranger"), backend.ErrLeaseNotFound)

	short := backend.Request{Key: key + "-short", LeaseID: "short-1", Timeout: timeout, Margin: margin}
	lease, err := b.Grant(ctx, short)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	s.wait(t, lease.TTL+lease.Margin+s.traits.Slack)
	_, err = b.Renew(ctx, short)
	wantBare("Renew after expiry", err, backend.ErrLeaseExpired)
}

// testHeldRemaining: a refused grant tells how long the holder has left,
// when the backend knows, and never more than the lease's TTL + margin.
func (s suite) testHeldRemaining(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	first := s.grant(t, c, "remaining", long, time.Second)
	s.wait(t, time.Second) // less time left than granted
	_, err := c.Grant(ctx, "remaining", long)
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("Grant on a held key: %v, want a *backend.HeldError", err)
	}
	if held.Remaining == 0 {
		t.Skip("the backend does not report the holder's time left (HeldError.Remaining is 0)")
	}
	// A second has passed on the coordinator's clock; allow real servers
	// their rounding and a busy machine's delays.
	full := first.TTL + first.Margin
	if held.Remaining > full-time.Second+s.traits.Slack || held.Remaining < full-time.Second-10*time.Second {
		t.Fatalf("HeldError.Remaining = %v for a lease of %v a second old; want about %v", held.Remaining, full, full-time.Second)
	}
}

// testNotifyFree: a subscription made before a release sees it; one closed
// sees nothing more. Wake-ups may be spurious, so only their presence is
// required, within a generous bound.
func (s suite) testNotifyFree(t *testing.T) {
	b := s.backend(t)
	n := capability[backend.Notifier](t, b, "backend.Notifier")
	c := fencing.New(b)
	ctx := context.Background()
	const key = "notify"
	lease := s.grant(t, c, key, long, time.Second)
	sub, err := n.NotifyFree(ctx, key)
	if err != nil {
		t.Fatalf("NotifyFree: %v", err)
	}
	other, err := n.NotifyFree(ctx, "notify-other")
	if err != nil {
		t.Fatalf("NotifyFree: %v", err)
	}
	defer other.Close()
	// The release comes right after NotifyFree returns: it must not be
	// missed.
	if err := c.Release(ctx, key, lease.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantWake(t, sub, "after Release")
	// A forced release wakes too, when the backend can force one.
	if f, ok := b.(backend.ForceReleaser); ok {
		s.grant(t, c, key, long, time.Second)
		drain(sub)
		if ended, err := f.ForceRelease(ctx, key); err != nil || !ended {
			t.Fatalf("ForceRelease = %v, %v; want true", ended, err)
		}
		wantWake(t, sub, "after ForceRelease")
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := n.NotifyFree(ctx, ""); !errors.Is(err, backend.ErrInvalidKey) {
		t.Fatalf("NotifyFree with an empty key: %v, want ErrInvalidKey", err)
	}
}

func wantWake(t *testing.T, sub backend.Subscription, what string) {
	t.Helper()
	select {
	case <-sub.Freed():
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake-up %s within 10s", what)
	}
}

func drain(sub backend.Subscription) {
	for {
		select {
		case <-sub.Freed():
		case <-time.After(50 * time.Millisecond):
			return
		}
	}
}

// testInspect: Inspect reports liveness, tokens and time left, keeps the
// highest token after the lease ends, and never the lease ID.
func (s suite) testInspect(t *testing.T) {
	b := s.backend(t)
	i := capability[backend.Inspector](t, b, "backend.Inspector")
	c := fencing.New(b)
	ctx := context.Background()
	inspect := func(key string) backend.KeyState {
		t.Helper()
		st, err := i.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", key, err)
		}
		return st
	}
	if st := inspect("never"); st != (backend.KeyState{}) {
		t.Fatalf("Inspect of a key never leased = %+v, want the zero KeyState", st)
	}
	lease := s.grant(t, c, "inspect", long, time.Second)
	st := inspect("inspect")
	if !st.Live || st.Token != lease.Token || st.MaxToken != lease.Token {
		t.Fatalf("Inspect of a live lease = %+v, want live with token and max token %d", st, lease.Token)
	}
	if full := lease.TTL + lease.Margin; st.Remaining <= 0 || st.Remaining > full {
		t.Fatalf("Inspect Remaining = %v, want in (0, %v]", st.Remaining, full)
	}
	if st.ExpiresAt.IsZero() {
		t.Fatalf("Inspect ExpiresAt is zero for a live lease")
	}
	if err := c.Release(ctx, "inspect", lease.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if st := inspect("inspect"); st != (backend.KeyState{MaxToken: lease.Token}) {
		t.Fatalf("Inspect after release = %+v, want only MaxToken %d", st, lease.Token)
	}
	next := s.grant(t, c, "inspect", long, time.Second)
	if st := inspect("inspect"); st.Token != next.Token || st.MaxToken != next.Token {
		t.Fatalf("Inspect after a re-grant = %+v, want token and max token %d", st, next.Token)
	}
	short, returned := s.grantShort(t, c, "inspect-expiry")
	s.waitExpired(t, short, returned)
	if st := inspect("inspect-expiry"); st != (backend.KeyState{MaxToken: short.Token}) {
		t.Fatalf("Inspect after expiry = %+v, want only MaxToken %d", st, short.Token)
	}
	if _, err := i.Inspect(ctx, ""); !errors.Is(err, backend.ErrInvalidKey) {
		t.Fatalf("Inspect with an empty key: %v, want ErrInvalidKey", err)
	}
}

// testForceRelease: a forced release frees the key whoever holds it; the old
// holder's renewals fail and the next token is larger.
func (s suite) testForceRelease(t *testing.T) {
	b := s.backend(t)
	f := capability[backend.ForceReleaser](t, b, "backend.ForceReleaser")
	c := fencing.New(b)
	ctx := context.Background()
	const key = "force"
	if ended, err := f.ForceRelease(ctx, key); err != nil || ended {
		t.Fatalf("ForceRelease of a key never leased = %v, %v; want false, nil", ended, err)
	}
	old := s.grant(t, c, key, long, time.Second)
	if ended, err := f.ForceRelease(ctx, key); err != nil || !ended {
		t.Fatalf("ForceRelease of a live lease = %v, %v; want true, nil", ended, err)
	}
	wantFree(t, c, key)
	wantCheck(t, c, key, old.Token, false)
	_, err := c.Renew(ctx, key, old.ID, long)
	wantErr(t, "Renew after a forced release", err, fencing.ErrLeaseNotFound)
	if ended, err := f.ForceRelease(ctx, key); err != nil || ended {
		t.Fatalf("second ForceRelease = %v, %v; want false, nil", ended, err)
	}
	next := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after a forced release", old.Token, next.Token)
	// The old holder's release (nil or ErrLeaseNotFound, as the backend
	// documents) must not touch the new holder's lease.
	_ = c.Release(ctx, key, old.ID)
	wantLive(t, c, key, next.Token)
}

// testList: every key with the prefix appears exactly once across the pages,
// with its state; other keys do not.
func (s suite) testList(t *testing.T) {
	b := s.backend(t)
	l := capability[backend.Lister](t, b, "backend.Lister")
	c := fencing.New(b)
	ctx := context.Background()
	want := map[string]uint64{}
	for _, k := range []string{"list/a", "list/b", "list/c", "list/d", "list/e", "list/\xff", "list/ключ"} {
		want[k] = s.grant(t, c, k, long, time.Second).Token
	}
	s.grant(t, c, "other/a", long, time.Second)
	s.grant(t, c, "lis", long, time.Second)
	released := s.grant(t, c, "list/released", long, time.Second)
	if err := c.Release(ctx, "list/released", released.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	got := map[string]backend.KeyState{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatalf("List did not end after 20 pages of 2")
		}
		page, next, err := l.List(ctx, "list/", cursor, 2)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, ki := range page {
			if _, dup := got[ki.Key]; dup {
				t.Fatalf("List returned %q twice", ki.Key)
			}
			got[ki.Key] = ki.State
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if st, ok := got["list/released"]; !ok || st.Live || st.MaxToken != released.Token {
		t.Fatalf("List: released key = %+v (listed %v), want not live with max token %d", st, ok, released.Token)
	}
	delete(got, "list/released")
	keys := make([]string, 0, len(got))
	for k, st := range got {
		keys = append(keys, k)
		if tok, ok := want[k]; !ok || !st.Live || st.Token != tok {
			t.Fatalf("List: %q = %+v; want live with token %d (wanted %v)", k, st, tok, ok)
		}
	}
	if len(got) != len(want) {
		slices.Sort(keys)
		t.Fatalf("List(\"list/\") returned %q, want the %d keys with that prefix", keys, len(want))
	}
}
