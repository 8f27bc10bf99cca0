package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Adversarial cases: the boundaries and the stale callers that histories
// rarely hit by chance. Each records what it does and checks the history
// with the model too, so a result the explicit checks do not name still
// fails.

// recorded returns a Coordinator over a fresh backend whose calls rec
// records, and the recorded backend.
func (s suite) recorded(t *testing.T) (*fencing.Coordinator, backend.Backend, *Recorder) {
	rec := NewRecorder(s.traits.Now)
	b := rec.Wrap(s.backend(t))
	return fencing.New(b), b, rec
}

// testExpiryBoundary: a lease is live up to its end and expired from it, to
// the backend's granularity: on a fake clock at the nanosecond (live at
// end-1ns, expired at end and end+1ns, for a grant and for a renewal); on a
// real server, live when a check returns before grant sent + timeout +
// margin, expired once grant returned + TTL + margin + Slack has passed, and
// the model judges the checks in between.
func (s suite) testExpiryBoundary(t *testing.T) {
	c, b, rec := s.recorded(t)
	ctx := context.Background()
	const key = "boundary"
	timeout, margin := s.short()
	if s.traits.Now != nil {
		lease := s.grant(t, c, key, timeout, margin)
		s.wait(t, timeout+margin-time.Nanosecond)
		wantLive(t, c, key, lease.Token)
		_, err := c.Grant(ctx, key, timeout, margin)
		var he *backend.HeldError
		if !errors.As(err, &he) || (he.Remaining != 0 && he.Remaining != time.Nanosecond) {
			t.Fatalf("Grant 1ns before the end: %v, want a *backend.HeldError with 1ns (or 0, unknown) left", err)
		}
		// A renewal in the last nanosecond extends from that instant.
		renewed, err := c.Renew(ctx, key, lease.ID, timeout, margin)
		if err != nil {
			t.Fatalf("Renew 1ns before the end: %v", err)
		}
		if want := s.traits.Now().Add(timeout + margin); !renewed.ExpiresAt.Equal(want) {
			t.Fatalf("renewed ExpiresAt = %v, want %v", renewed.ExpiresAt, want)
		}
		s.wait(t, timeout+margin-time.Nanosecond)
		wantLive(t, c, key, lease.Token)
		s.wait(t, time.Nanosecond) // exactly the end
		wantFree(t, c, key)
		_, err = c.Renew(ctx, key, lease.ID, timeout, margin)
		wantErr(t, "Renew at the end", err, fencing.ErrLeaseExpired)
		wantErr(t, "Release at the end", c.Release(ctx, key, lease.ID), fencing.ErrLeaseExpired)
		_, err = b.Grant(ctx, backend.Request{Key: key, LeaseID: lease.ID, Timeout: timeout, Margin: margin})
		wantErr(t, "resent Grant at the end", err, backend.ErrLeaseExpired)
		s.wait(t, time.Nanosecond)
		wantFree(t, c, key)
		next := s.grant(t, c, key, timeout, margin)
		s.wantNext(t, "grant at end+1ns", lease.Token, next.Token)
		CheckLinearizable(t, rec.History(), s.traits)
		return
	}
	sent := time.Now()
	lease := s.grant(t, c, key, timeout, margin)
	returned := time.Now()
	end := sent.Add(timeout + margin) // the earliest the lease may end
	for _, before := range []time.Duration{50 * time.Millisecond, 10 * time.Millisecond, 2 * time.Millisecond} {
		time.Sleep(time.Until(end.Add(-before)))
		_, live, err := c.Token(ctx, key)
		if err != nil {
			t.Fatalf("Token: %v", err)
		}
		if !live && time.Now().Before(end) {
			t.Fatalf("the lease expired %v before its end (sent + timeout + margin)", time.Until(end))
		}
	}
	for _, after := range []time.Duration{0, 2 * time.Millisecond} {
		time.Sleep(time.Until(end.Add(after)))
		if _, _, err := c.Token(ctx, key); err != nil {
			t.Fatalf("Token: %v", err)
		}
	}
	s.waitExpired(t, lease, returned)
	wantFree(t, c, key)
	_, err := c.Renew(ctx, key, lease.ID, timeout, margin)
	wantErr(t, "Renew after the end", err, fencing.ErrLeaseExpired)
	CheckLinearizable(t, rec.History(), s.traits)
}

// TokenPresetter is implemented by a Harness that can set a key's token
// counter, so the suite can test the end of the token space without minting
// every token. It is optional: it is a capability of the harness, not of the
// backend, so without it the case that needs it is skipped, saying so (a
// store whose counter cannot be set, such as etcd's global revision, cannot
// offer it).
type TokenPresetter interface {
	// PresetToken makes key, on a backend this harness made (and empty
	// of key), look as if token were the highest token ever minted on it,
	// with no live lease: the next grant mints a larger one.
	PresetToken(ctx context.Context, b backend.Backend, key string, token uint64) error
}

// testTokenExhaustion: the last token is minted once; then grants on the key
// fail with ErrTokenSpaceExhausted and change nothing, Lock and Hold give up
// with it instead of waiting, and other keys go on.
func (s suite) testTokenExhaustion(t *testing.T) {
	p, ok := s.h.(TokenPresetter)
	if !ok {
		// A harness capability, not a backend failure: a store whose
		// counter cannot be preset (etcd's revisions are global) has
		// nothing to run here. CI lets only skips that say so through.
		t.Skip("harness capability: the harness does not implement conformance.TokenPresetter")
	}
	b := s.backend(t)
	c := fencing.New(b)
	ctx := context.Background()
	const key = "exhaust"
	last := s.traits.MaxToken
	if last == 0 {
		last = backend.MaxToken
	}
	if err := p.PresetToken(ctx, b, key, last-1); err != nil {
		t.Fatalf("PresetToken: %v", err)
	}
	wantFree(t, c, key)
	lease := s.grant(t, c, key, long, time.Second)
	if lease.Token != last {
		t.Fatalf("grant after PresetToken(%d) got token %d, want the last token %d", last-1, lease.Token, last)
	}
	wantLive(t, c, key, last)
	// While the last token is live, its resent grant still answers, and
	// another grant is refused for the holder, not for exhaustion.
	if l, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: lease.ID, Timeout: long, Margin: time.Second}); err != nil || l.Token != last {
		t.Fatalf("resent grant of the last token = %+v, %v; want token %d", l, err, last)
	}
	_, err := c.Grant(ctx, key, long)
	wantErr(t, "Grant while the last token is live", err, fencing.ErrLeaseHeld)
	if err := c.Release(ctx, key, lease.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for i := range 2 {
		refused := fmt.Sprint("refused-", i)
		_, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: refused, Timeout: long, Margin: time.Second})
		wantErr(t, "Grant past the last token", err, backend.ErrTokenSpaceExhausted)
		wantFree(t, c, key)
		_, err = b.Renew(ctx, backend.Request{Key: key, LeaseID: refused, Timeout: long, Margin: time.Second})
		wantErr(t, "Renew of a refused grant's ID", err, backend.ErrLeaseNotFound)
	}
	_, err = c.Grant(ctx, key, long)
	wantErr(t, "Coordinator.Grant past the last token", err, fencing.ErrTokenSpaceExhausted)
	if err := c.Release(ctx, key, lease.ID); err != nil {
		t.Fatalf("resent Release of the last lease after exhaustion: %v, want nil (released already)", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ttl, margin := s.holdTTL(t)
	if h, err := c.Lock(lctx, key, ttl, fencing.WithMargin(margin)); !errors.Is(err, fencing.ErrTokenSpaceExhausted) {
		if err == nil {
			h.Release(ctx)
		}
		t.Fatalf("Lock past the last token: %v, want ErrTokenSpaceExhausted at once", err)
	}
	if h, err := c.Hold(ctx, key, ttl, fencing.WithMargin(margin)); !errors.Is(err, fencing.ErrTokenSpaceExhausted) {
		if err == nil {
			h.Release(ctx)
		}
		t.Fatalf("Hold past the last token: %v, want ErrTokenSpaceExhausted", err)
	}
	if i, ok := b.(backend.Inspector); ok {
		if st, err := i.Inspect(ctx, key); err != nil || st.Live || st.MaxToken != last {
			t.Fatalf("Inspect of an exhausted key = %+v, %v; want not live, max token %d", st, err, last)
		}
	}
	other := s.grant(t, c, key+"-other", long, time.Second)
	if s.traits.DenseTokens && other.Token != 1 {
		t.Fatalf("another key's first token = %d, want 1", other.Token)
	}
	wantLive(t, c, key+"-other", other.Token)
}

// testLateCallsFromOlderEpochs: a key goes through leases that were
// released, expired and (when the backend can) forced out, then a live one.
// From every older lease, renewals (with the same and with a different
// timeout and margin, which some stores serve by another code path),
// releases and resent grants fail and change nothing: after expiry with
// ErrLeaseExpired while that lease is the key's most recent, and with
// ErrLeaseNotFound once a newer one was granted.
func (s suite) testLateCallsFromOlderEpochs(t *testing.T) {
	c, b, rec := s.recorded(t)
	ctx := context.Background()
	const key = "epochs"
	timeout, margin := s.short()
	type epoch struct {
		lease fencing.Lease
		how   string
	}
	var old []epoch
	late := func(e epoch, want error) {
		t.Helper()
		what := fmt.Sprintf("the %s lease (token %d)", e.how, e.lease.Token)
		for _, d := range [][2]time.Duration{{timeout, margin}, {long, time.Second}, {timeout / 2, 0}} {
			_, err := c.Renew(ctx, key, e.lease.ID, d[0], d[1])
			wantErr(t, fmt.Sprintf("Renew(%v, %v) of %s", d[0], d[1], what), err, want)
		}
		if e.how == "forced" {
			_ = c.Release(ctx, key, e.lease.ID) // nil or ErrLeaseNotFound, as the backend documents
		} else {
			wantErr(t, "Release of "+what, c.Release(ctx, key, e.lease.ID), want)
		}
	}
	expire := func() epoch {
		l, returned := s.grantShort(t, c, key)
		s.waitExpired(t, l, returned)
		e := epoch{l, "expired"}
		late(e, fencing.ErrLeaseExpired) // the most recent lease: expired
		_, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: l.ID, Timeout: timeout, Margin: margin})
		wantErr(t, "resent Grant of the expired lease", err, backend.ErrLeaseExpired)
		wantFree(t, c, key) // nothing revived it
		return e
	}

	released := s.grant(t, c, key, long, time.Second)
	if err := c.Release(ctx, key, released.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	old = append(old, epoch{released, "released"})
	old = append(old, expire())
	if f, ok := b.(backend.ForceReleaser); ok {
		l := s.grant(t, c, key, long, time.Second)
		if ended, err := f.ForceRelease(ctx, key); err != nil || !ended {
			t.Fatalf("ForceRelease = %v, %v", ended, err)
		}
		old = append(old, epoch{l, "forced"})
	}
	old = append(old, expire())
	current := s.grant(t, c, key, long, time.Second)
	for _, e := range old {
		late(e, fencing.ErrLeaseNotFound)
		_, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: e.lease.ID, Timeout: long, Margin: time.Second})
		wantErr(t, fmt.Sprintf("resent Grant of the %s lease while another is live", e.how), err, backend.ErrLeaseHeld)
		wantLive(t, c, key, current.Token)
	}
	if err := c.Release(ctx, key, current.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	next := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after the late calls", current.Token, next.Token)
	CheckLinearizable(t, rec.History(), s.traits)
}

// testKeysNeverCollide: keys that a naive encoding would merge stay
// distinct: the NFC and NFD forms of one word, keys that run together under
// a prefix or separator scheme, keys that are prefixes of each other, and
// keys of the longest length that differ only in their last byte.
func (s suite) testKeysNeverCollide(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	longest := strings.Repeat("k", backend.MaxKeyLength-1)
	keys := []string{
		"caf\u00e9", "cafe\u0301", // NFC, NFD
		"\u212b", "\u00c5", "A\u030a", // Angstrom sign, NFC, NFD
		"p", "pp", "ppp", "p/", "p/q", "p/q/r", "p:", "p:q", "p::q",
		"a:b:c", "a:b" + "\x00" + "c", "a\x00b:c", "a", "a\x00", "a\x00\x00",
		"fencing:a", "fencing:{a}", "{fencing}:a", "lease/a", "token/a", "a/lease", "a/token",
		"%2F", "/", "%", "\\/", "\\",
		longest + "a", longest + "b", longest,
	}
	leases := make(map[string]fencing.Lease, len(keys))
	for _, k := range keys {
		l := s.grant(t, c, k, long, time.Second)
		if s.traits.DenseTokens && l.Token != 1 {
			t.Fatalf("key %q: first token %d, want 1: it shares a counter with another key", k, l.Token)
		}
		leases[k] = l
	}
	for i, k := range keys {
		if err := c.Release(ctx, k, leases[k].ID); err != nil {
			t.Fatalf("Release(%q): %v", k, err)
		}
		for j, other := range keys {
			if j <= i {
				wantFree(t, c, other)
			} else {
				wantLive(t, c, other, leases[other].Token)
			}
		}
	}
	for _, k := range keys {
		l := s.grant(t, c, k, long, time.Second)
		s.wantNext(t, fmt.Sprintf("key %q after its release", k), leases[k].Token, l.Token)
	}
}
