package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

func (s suite) testTokensIncrease(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	const key = "tokens"
	var prev uint64
	first := s.grant(t, c, key, long, time.Second)
	if s.traits.DenseTokens && first.Token != 1 {
		t.Fatalf("first token %d, want 1 (dense tokens)", first.Token)
	}
	prev = first.Token
	if err := c.Release(ctx, key, first.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Across release.
	for i := range 3 {
		lease := s.grant(t, c, key, long, time.Second)
		s.wantNext(t, fmt.Sprintf("grant %d after release", i), prev, lease.Token)
		prev = lease.Token
		renewed, err := c.Renew(ctx, key, lease.ID, long)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if renewed.Token != lease.Token || renewed.ID != lease.ID {
			t.Fatalf("Renew changed the lease: token %d -> %d, ID %q -> %q", lease.Token, renewed.Token, lease.ID, renewed.ID)
		}
		if err := c.Release(ctx, key, lease.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	// Across expiry.
	lease, returned := s.grantShort(t, c, key)
	s.wantNext(t, "grant before expiry", prev, lease.Token)
	s.waitExpired(t, lease, returned)
	wantFree(t, c, key)
	next := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after expiry", lease.Token, next.Token)
	// A failed grant consumes nothing.
	if _, err := c.Grant(ctx, key, long); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("Grant on a held key: %v, want ErrLeaseHeld", err)
	}
	if err := c.Release(ctx, key, next.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	after := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after a failed grant", next.Token, after.Token)
}

func (s suite) testKeysIndependent(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	a1 := s.grant(t, c, "a", long, time.Second)
	b1 := s.grant(t, c, "b", long, time.Second)
	if err := c.Release(ctx, "a", a1.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	a2 := s.grant(t, c, "a", long, time.Second)
	s.wantNext(t, "key a", a1.Token, a2.Token)
	wantLive(t, c, "b", b1.Token) // a's grants do not touch b
	if s.traits.DenseTokens && (a1.Token != 1 || b1.Token != 1 || a2.Token != 2) {
		t.Fatalf("tokens a=%d,%d b=%d; want a=1,2 b=1 (dense, per-key sequences)", a1.Token, a2.Token, b1.Token)
	}
	wantCheck(t, c, "b", a2.Token+b1.Token+1000, false)
}

func (s suite) testRacingGrants(t *testing.T) {
	c, _ := s.coordinator(t)
	const n = 16
	const key = "contended"
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		leases = make([]fencing.Lease, n)
		errs   = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			leases[i], errs[i] = c.Grant(context.Background(), key, long)
		})
	}
	close(start)
	wg.Wait()
	var winners []fencing.Lease
	for i, err := range errs {
		switch {
		case err == nil:
			winners = append(winners, leases[i])
		case errors.Is(err, fencing.ErrLeaseHeld):
		default:
			t.Errorf("goroutine %d: %v, want nil or ErrLeaseHeld", i, err)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d winners of %d racing grants, want exactly 1", len(winners), n)
	}
	wantLive(t, c, key, winners[0].Token)
	if s.traits.DenseTokens && winners[0].Token != 1 {
		t.Fatalf("winner's token %d, want 1: failed grants must not consume tokens", winners[0].Token)
	}
}

func (s suite) testExpiry(t *testing.T) {
	c, _ := s.coordinator(t)
	const key = "expiry"
	timeout, margin := s.short()
	if now := s.traits.Now; now != nil {
		// Exact: expiresAt = now + timeout + margin, live on [grant, expiresAt).
		s.wait(t, 7*time.Hour) // a request delivered late is dated when processed
		granted := now()
		lease := s.grant(t, c, key, timeout, margin)
		if want := granted.Add(timeout + margin); !lease.ExpiresAt.Equal(want) {
			t.Fatalf("ExpiresAt = %v, want coordinator now + timeout + margin = %v", lease.ExpiresAt, want)
		}
		if lease.TTL != timeout || lease.Margin != margin {
			t.Fatalf("TTL, Margin = %v, %v; want %v, %v", lease.TTL, lease.Margin, timeout, margin)
		}
		s.wait(t, timeout+margin-time.Nanosecond)
		wantLive(t, c, key, lease.Token)
		s.wait(t, time.Nanosecond)
		wantFree(t, c, key)
		wantCheck(t, c, key, lease.Token, false)
		return
	}
	sent := time.Now()
	lease := s.grant(t, c, key, timeout, margin)
	returned := time.Now()
	if lease.TTL < timeout || lease.Margin != margin {
		t.Fatalf("TTL, Margin = %v, %v; want TTL >= %v and margin %v", lease.TTL, lease.Margin, timeout, margin)
	}
	if lease.Deadline.After(returned.Add(timeout)) || lease.Deadline.Before(sent.Add(timeout)) {
		t.Fatalf("Deadline %v is not send time + timeout", lease.Deadline)
	}
	if tok, live, err := c.Token(context.Background(), key); err != nil || !live || tok != lease.Token {
		if s.inTime(t, sent, lease) {
			t.Fatalf("Token(%q) right after the grant = %d, %v, %v; want %d, live", key, tok, live, err, lease.Token)
		}
	}
	s.waitExpired(t, lease, returned)
	wantFree(t, c, key)
	wantCheck(t, c, key, lease.Token, false)
}

func (s suite) testRenewExtendsFromNow(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	const key = "renew"
	timeout, margin := s.short()
	sent := time.Now()
	lease, _ := s.grantShort(t, c, key)
	if now := s.traits.Now; now != nil {
		// Renewing halfway extends from now, and renewing again does not
		// pile up margins.
		s.wait(t, timeout/2)
		for range 3 {
			renewed, err := c.Renew(ctx, key, lease.ID, timeout, margin)
			if err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if want := now().Add(timeout + margin); !renewed.ExpiresAt.Equal(want) {
				t.Fatalf("renewed ExpiresAt = %v, want now + timeout + margin = %v", renewed.ExpiresAt, want)
			}
		}
		s.wait(t, timeout+margin-time.Nanosecond)
		wantLive(t, c, key, lease.Token)
		s.wait(t, time.Nanosecond)
		wantFree(t, c, key)
		return
	}
	// Real time: a renewal for long outlives the first term...
	renewed, err := c.Renew(ctx, key, lease.ID, long)
	if err != nil && !s.inTime(t, sent, lease) {
		return // said in the log: not a failure of the backend
	}
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if renewed.Token != lease.Token {
		t.Fatalf("Renew changed the token %d -> %d", lease.Token, renewed.Token)
	}
	s.waitExpired(t, lease, time.Now())
	wantLive(t, c, key, lease.Token)
	// ...and renewing back to a short term, several times, ends one short
	// term after the last renewal: margins do not accumulate.
	var last fencing.Lease
	var lastReturned time.Time
	for range 3 {
		if last, err = c.Renew(ctx, key, lease.ID, timeout, margin); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		lastReturned = time.Now()
	}
	s.waitExpired(t, last, lastReturned)
	wantFree(t, c, key)
}

func (s suite) testRenewForeignOrStale(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	const key = "foreign"
	a := s.grant(t, c, key, long, time.Second)
	for _, id := range []string{"not-a-lease", a.ID + "x", strings.ToUpper(a.ID) + "-", strings.Repeat("z", len(a.ID))} {
		_, err := c.Renew(ctx, key, id, long)
		wantErr(t, fmt.Sprintf("Renew with foreign ID %q", id), err, fencing.ErrLeaseNotFound)
	}
	// An ID from another key is foreign too.
	other := s.grant(t, c, "other", long, time.Second)
	_, err := c.Renew(ctx, key, other.ID, long)
	wantErr(t, "Renew with another key's ID", err, fencing.ErrLeaseNotFound)
	wantLive(t, c, key, a.Token)
	// A released holder's ID is stale once B holds the key.
	if err := c.Release(ctx, key, a.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	_, err = c.Renew(ctx, key, a.ID, long)
	wantErr(t, "Renew after release", err, fencing.ErrLeaseNotFound)
	wantFree(t, c, key)
	b := s.grant(t, c, key, long, time.Second)
	_, err = c.Renew(ctx, key, a.ID, long)
	wantErr(t, "Renew by the previous holder", err, fencing.ErrLeaseNotFound)
	wantLive(t, c, key, b.Token)
	s.wantNext(t, "grant after stale renewals", a.Token, b.Token)
}

func (s suite) testLateRenewal(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	const key = "late"
	lease, returned := s.grantShort(t, c, key)
	s.waitExpired(t, lease, returned)
	_, err := c.Renew(ctx, key, lease.ID, long)
	wantErr(t, "late Renew", err, fencing.ErrLeaseExpired)
	wantFree(t, c, key) // the late renewal revived nothing
	_, err = c.Renew(ctx, key, lease.ID, long)
	wantErr(t, "second late Renew", err, fencing.ErrLeaseExpired)
	next := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after a late renewal", lease.Token, next.Token)
	// Now that a newer lease exists, the old ID is merely stale.
	_, err = c.Renew(ctx, key, lease.ID, long)
	wantErr(t, "Renew by a superseded holder", err, fencing.ErrLeaseNotFound)
	wantLive(t, c, key, next.Token)
}

func (s suite) testCheckToken(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	const key = "check"
	// Never leased.
	for _, tok := range []uint64{0, 1, 2, 12345, math.MaxUint64} {
		wantCheck(t, c, key, tok, false)
	}
	wantFree(t, c, key)
	// Released mid-term: fenced at once.
	a := s.grant(t, c, key, long, time.Second)
	wantCheck(t, c, key, a.Token, true)
	wantCheck(t, c, key, a.Token+1, false)
	wantCheck(t, c, key, a.Token-1, false)
	if err := c.Release(ctx, key, a.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantCheck(t, c, key, a.Token, false)
	// Expired, then superseded.
	sent := time.Now()
	b, returned := s.grantShort(t, c, key)
	if ok, err := c.CheckToken(context.Background(), key, b.Token); err != nil || !ok {
		if s.inTime(t, sent, b) {
			t.Fatalf("CheckToken(%q, %d) right after the grant = %v, %v; want true", key, b.Token, ok, err)
		}
	}
	wantCheck(t, c, key, a.Token, false)
	s.waitExpired(t, b, returned)
	wantCheck(t, c, key, b.Token, false)
	d := s.grant(t, c, key, long, time.Second)
	wantCheck(t, c, key, b.Token, false)
	wantCheck(t, c, key, a.Token, false)
	wantCheck(t, c, key, d.Token, true)
}

func (s suite) testRelease(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	const key = "release"
	a := s.grant(t, c, key, long, time.Second)
	wantErr(t, "Release with a foreign ID", c.Release(ctx, key, "someone-else"), fencing.ErrLeaseNotFound)
	wantErr(t, "Release on another key", c.Release(ctx, "another-key", a.ID), fencing.ErrLeaseNotFound)
	wantLive(t, c, key, a.Token)
	if err := c.Release(ctx, key, a.ID); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	wantFree(t, c, key)
	if err := c.Release(ctx, key, a.ID); err != nil {
		t.Fatalf("Release of a released lease (a resent release) = %v, want nil", err)
	}
	_, err := c.Renew(ctx, key, a.ID, long)
	wantErr(t, "Renew after release", err, fencing.ErrLeaseNotFound)
	b := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after release", a.Token, b.Token)
	// A stale release must never end the newer holder's lease.
	wantErr(t, "stale Release", c.Release(ctx, key, a.ID), fencing.ErrLeaseNotFound)
	wantLive(t, c, key, b.Token)
}

func (s suite) testExpiredHolder(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	const key = "expired-holder"
	a, returned := s.grantShort(t, c, key)
	s.waitExpired(t, a, returned)
	wantErr(t, "Release of an expired lease", c.Release(ctx, key, a.ID), fencing.ErrLeaseExpired)
	b := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after an expired release", a.Token, b.Token)
	wantErr(t, "Release by the expired holder after a new grant", c.Release(ctx, key, a.ID), fencing.ErrLeaseNotFound)
	wantLive(t, c, key, b.Token)
}

func (s suite) testGrantRetry(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	ctx := context.Background()
	const key = "retry"
	req := backend.Request{Key: key, LeaseID: "retry-lease-1", Timeout: long, Margin: time.Second}
	first, err := b.Grant(ctx, req)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	again, err := b.Grant(ctx, req)
	if err != nil {
		t.Fatalf("resent Grant: %v", err)
	}
	if again.Token != first.Token || again.LeaseID != req.LeaseID {
		t.Fatalf("resent Grant = token %d ID %q, want the first grant's token %d", again.Token, again.LeaseID, first.Token)
	}
	if err := b.Release(ctx, key, req.LeaseID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	_, err = b.Grant(ctx, req)
	wantErr(t, "Grant resent after its lease was released", err, backend.ErrLeaseNotFound)
	wantFree(t, c, key)

	timeout, margin := s.short()
	short := backend.Request{Key: key, LeaseID: "retry-lease-2", Timeout: timeout, Margin: margin}
	lease, err := b.Grant(ctx, short)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	s.wantNext(t, "grant after a resent grant", first.Token, lease.Token)
	s.waitExpired(t, fencing.Lease{TTL: lease.TTL, Margin: lease.Margin}, time.Now())
	_, err = b.Grant(ctx, short)
	wantErr(t, "Grant resent after its lease expired", err, backend.ErrLeaseExpired)
	wantFree(t, c, key)
	next := s.grant(t, c, key, long, time.Second)
	s.wantNext(t, "grant after resent grants", lease.Token, next.Token)
}

func (s suite) testBadInput(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	ctx := context.Background()
	const held = "held"
	lease := s.grant(t, c, held, long, time.Second)
	huge := strings.Repeat("k", backend.MaxKeyLength+1)
	id := "bad-input-lease"

	keys := []string{"", huge}
	for _, key := range keys {
		_, err := c.Grant(ctx, key, long)
		wantErr(t, "Coordinator.Grant with a bad key", err, fencing.ErrInvalidKey)
		_, err = c.Renew(ctx, key, lease.ID, long)
		wantErr(t, "Coordinator.Renew with a bad key", err, fencing.ErrInvalidKey)
		wantErr(t, "Coordinator.Release with a bad key", c.Release(ctx, key, lease.ID), fencing.ErrInvalidKey)
		_, err = c.CheckToken(ctx, key, 1)
		wantErr(t, "Coordinator.CheckToken with a bad key", err, fencing.ErrInvalidKey)
		_, err = b.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: long})
		wantErr(t, "Backend.Grant with a bad key", err, backend.ErrInvalidKey)
		_, err = b.Renew(ctx, backend.Request{Key: key, LeaseID: lease.ID, Timeout: long})
		wantErr(t, "Backend.Renew with a bad key", err, backend.ErrInvalidKey)
		wantErr(t, "Backend.Release with a bad key", b.Release(ctx, key, lease.ID), backend.ErrInvalidKey)
		_, _, err = b.Token(ctx, key)
		wantErr(t, "Backend.Token with a bad key", err, backend.ErrInvalidKey)
	}

	durations := []struct {
		timeout, margin time.Duration
		want            error
	}{
		{0, time.Second, fencing.ErrInvalidTimeout},
		{time.Nanosecond, time.Second, fencing.ErrInvalidTimeout},
		{backend.MinTimeout - 1, 0, fencing.ErrInvalidTimeout},
		{-time.Second, time.Second, fencing.ErrInvalidTimeout},
		{math.MinInt64, 0, fencing.ErrInvalidTimeout},
		{math.MaxInt64, 0, fencing.ErrInvalidTimeout},
		{backend.MaxDuration, time.Nanosecond, fencing.ErrInvalidTimeout},
		{time.Second, math.MaxInt64, fencing.ErrInvalidTimeout},
		{time.Second, -time.Nanosecond, fencing.ErrInvalidMargin},
		{time.Second, math.MinInt64, fencing.ErrInvalidMargin},
	}
	for _, d := range durations {
		what := fmt.Sprintf("timeout %v margin %v", d.timeout, d.margin)
		_, err := c.Grant(ctx, "fresh", d.timeout, d.margin)
		wantErr(t, "Coordinator.Grant "+what, err, d.want)
		_, err = c.Renew(ctx, held, lease.ID, d.timeout, d.margin)
		wantErr(t, "Coordinator.Renew "+what, err, d.want)
		_, err = b.Grant(ctx, backend.Request{Key: "fresh", LeaseID: id, Timeout: d.timeout, Margin: d.margin})
		wantErr(t, "Backend.Grant "+what, err, d.want)
		_, err = b.Renew(ctx, backend.Request{Key: held, LeaseID: lease.ID, Timeout: d.timeout, Margin: d.margin})
		wantErr(t, "Backend.Renew "+what, err, d.want)
	}

	for _, bad := range []string{"", strings.Repeat("x", backend.MaxLeaseIDLength+1), strings.Repeat("y", 1<<16)} {
		_, err := c.Renew(ctx, held, bad, long)
		wantErr(t, "Renew with a malformed ID", err, fencing.ErrLeaseNotFound)
		wantErr(t, "Release with a malformed ID", c.Release(ctx, held, bad), fencing.ErrLeaseNotFound)
		_, err = b.Grant(ctx, backend.Request{Key: "fresh", LeaseID: bad, Timeout: long})
		wantErr(t, "Backend.Grant with a malformed ID", err, backend.ErrLeaseNotFound)
	}

	// Bad renewals of a lease about to end do not extend it.
	ending, returned := s.grantShort(t, c, "ending")
	for _, d := range durations {
		_, err := b.Renew(ctx, backend.Request{Key: "ending", LeaseID: ending.ID, Timeout: d.timeout, Margin: d.margin})
		wantErr(t, fmt.Sprintf("Backend.Renew of an ending lease, timeout %v margin %v", d.timeout, d.margin), err, d.want)
	}
	s.waitExpired(t, ending, returned)
	wantFree(t, c, "ending")

	// Nothing changed: the held lease is intact, "fresh" was never leased,
	// and the next tokens are the ones the backend would have minted anyway.
	wantLive(t, c, held, lease.Token)
	wantFree(t, c, "fresh")
	first := s.grant(t, c, "fresh", long, time.Second)
	if s.traits.DenseTokens && first.Token != 1 {
		t.Fatalf("first token on a key after rejected requests = %d, want 1", first.Token)
	}
	if err := c.Release(ctx, held, lease.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	next := s.grant(t, c, held, long, time.Second)
	s.wantNext(t, "grant after rejected requests", lease.Token, next.Token)

	// The longest key and the longest lease are valid.
	maxKey := strings.Repeat("m", backend.MaxKeyLength)
	longest := s.grant(t, c, maxKey, backend.MaxDuration-time.Second, time.Second)
	wantLive(t, c, maxKey, longest.Token)
}

func (s suite) testDoneContext(t *testing.T) {
	b := s.backend(t)
	c := fencing.New(b)
	const key = "ctx"
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()

	for _, ctx := range []context.Context{canceled, expired} {
		want := ctx.Err()
		_, err := c.Grant(ctx, key, long)
		wantErr(t, "Grant with a done context", err, want)
		_, err = b.Grant(ctx, backend.Request{Key: key, LeaseID: "ctx-lease", Timeout: long})
		wantErr(t, "Backend.Grant with a done context", err, want)
		_, _, err = c.Token(ctx, key)
		wantErr(t, "Token with a done context", err, want)
	}
	for _, ctx := range []context.Context{canceled, expired} {
		want := ctx.Err()
		ttl, margin := s.holdTTL(t)
		h, err := c.Hold(ctx, key, ttl, fencing.WithMargin(margin))
		if err == nil {
			h.Release(context.Background())
		}
		wantErr(t, "Hold with a done context", err, want)
		h, err = c.Lock(ctx, key, ttl, fencing.WithMargin(margin))
		if err == nil {
			h.Release(context.Background())
		}
		wantErr(t, "Lock with a done context", err, want)
		called := false
		err = c.Do(ctx, key, ttl, func(context.Context, fencing.Lease) error { called = true; return nil }, fencing.WithMargin(margin))
		wantErr(t, "Do with a done context", err, want)
		if called {
			t.Fatalf("Do with a done context ran fn")
		}
		_, err = c.CheckToken(ctx, key, 1)
		wantErr(t, "CheckToken with a done context", err, want)
	}
	wantFree(t, c, key)
	lease := s.grant(t, c, key, long, time.Second)
	if s.traits.DenseTokens && lease.Token != 1 {
		t.Fatalf("token after canceled grants = %d, want 1", lease.Token)
	}
	for _, ctx := range []context.Context{canceled, expired} {
		want := ctx.Err()
		_, err := c.Renew(ctx, key, lease.ID, time.Millisecond, 0)
		wantErr(t, "Renew with a done context", err, want)
		wantErr(t, "Release with a done context", c.Release(ctx, key, lease.ID), want)
	}
	s.wait(t, 2*time.Millisecond) // had the renewal taken effect, the lease would be over
	wantLive(t, c, key, lease.Token)
}

func (s suite) testLeaseIDs(t *testing.T) {
	c, _ := s.coordinator(t)
	ctx := context.Background()
	// The key has a '-', which the IDs' base32 alphabet lacks, so only an
	// ID made from the key can contain it, in any letter case.
	const key = "lease-ids"
	seen := make(map[string]bool)
	for range 50 {
		lease := s.grant(t, c, key, long, time.Second)
		if len(lease.ID) < 22 {
			t.Fatalf("lease ID %q is too short to hold 128 random bits", lease.ID)
		}
		if seen[lease.ID] {
			t.Fatalf("lease ID %q issued twice", lease.ID)
		}
		seen[lease.ID] = true
		if strings.Contains(strings.ToLower(lease.ID), key) {
			t.Fatalf("lease ID %q contains the key", lease.ID)
		}
		if err := c.Release(ctx, key, lease.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	// The same key, tokens and (on a fake clock) times on a second backend
	// give other IDs: they are not derived from what a caller can see.
	c2, _ := s.coordinator(t)
	for i := range 5 {
		lease := s.grant(t, c2, key, long, time.Second)
		if seen[lease.ID] {
			t.Fatalf("lease ID %q (grant %d) on a second backend repeats one from the first", lease.ID, i)
		}
		if err := c2.Release(ctx, key, lease.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

func (s suite) testOddKeys(t *testing.T) {
	c, _ := s.coordinator(t)
	keys := []string{
		"a", "A", "a:", ":a", "a:b", "a/b", "a/", "{a}", "{", "}", "{}", "}{", "{{}}", "a{b}c",
		"fencing:", "fencing/", "\x00", "\x00\x00", "\xff\xfe", " ", "a b", "ключ", "*", "?", "[a]",
		"a:token", "a:lease", "{a}:token",
	}
	leases := make(map[string]fencing.Lease)
	for _, key := range keys {
		leases[key] = s.grant(t, c, key, long, time.Second)
		if s.traits.DenseTokens && leases[key].Token != 1 {
			t.Fatalf("key %q: first token %d, want 1: it collides with another key", key, leases[key].Token)
		}
	}
	for _, key := range keys {
		wantLive(t, c, key, leases[key].Token)
	}
	// Releasing one key frees only that key.
	if err := c.Release(context.Background(), "{}", leases["{}"].ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantFree(t, c, "{}")
	for _, key := range keys {
		if key != "{}" {
			wantLive(t, c, key, leases[key].Token)
		}
	}
}

func (s suite) testClosed(t *testing.T) {
	b, err := s.h.NewBackend(context.Background(), t)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	c := fencing.New(b)
	ctx := context.Background()
	lease := s.grant(t, c, "closed", long, time.Second)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err = c.Grant(ctx, "after-close", long)
	wantErr(t, "Grant after Close", err, backend.ErrClosed)
	_, err = c.Renew(ctx, "closed", lease.ID, long)
	wantErr(t, "Renew after Close", err, backend.ErrClosed)
	wantErr(t, "Release after Close", c.Release(ctx, "closed", lease.ID), backend.ErrClosed)
	_, err = c.CheckToken(ctx, "closed", lease.Token)
	wantErr(t, "CheckToken after Close", err, backend.ErrClosed)
	if tok, live, err := b.Token(ctx, "closed"); tok != 0 || live || !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Backend.Token after Close = %d, %v, %v; want 0, false, ErrClosed", tok, live, err)
	}
	_, err = b.Grant(ctx, backend.Request{Key: "closed", LeaseID: lease.ID, Timeout: long, Margin: time.Second})
	wantErr(t, "resent Grant of a live lease after Close", err, backend.ErrClosed)
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
