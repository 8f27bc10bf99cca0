package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Cases for backend.Queuer, calling it directly. Each runs only when the
// backend implements it. The line is advisory and its entries leased; these
// cases hold a backend to the order, the leases and the wake-ups that
// package fencing's WithFIFO builds on.

// queuer returns a fresh backend and its Queuer, or skips.
func (s suite) queuer(t *testing.T) (backend.Backend, backend.Queuer) {
	t.Helper()
	b := s.backend(t)
	return b, capability[backend.Queuer](t, b, "backend.Queuer")
}

// queueTTL is the TTL of entries that the test lets expire: as short as the
// backend honours without raising it.
func (s suite) queueTTL() time.Duration {
	if s.traits.Now != nil {
		return 10 * time.Second // a fake clock: any length is instant
	}
	return max(s.traits.MinTTL, 200*time.Millisecond)
}

// enqueue calls Enqueue and fails the test on an error or a Place whose TTL
// is below the one asked for.
func enqueue(t *testing.T, q backend.Queuer, key, waiter string, ttl time.Duration) backend.Place {
	t.Helper()
	p, err := q.Enqueue(context.Background(), key, waiter, ttl)
	if err != nil {
		t.Fatalf("Enqueue(%q, %q, %v): %v", key, waiter, ttl, err)
	}
	if p.TTL < ttl {
		t.Fatalf("Enqueue(%q, %q, %v): Place.TTL = %v, want >= the ttl asked for", key, waiter, ttl, p.TTL)
	}
	if p.Ahead < 0 || p.AheadRemaining < 0 {
		t.Fatalf("Enqueue(%q, %q): Place %+v has a negative field", key, waiter, p)
	}
	if p.Ahead == 0 && p.AheadRemaining != 0 {
		t.Fatalf("Enqueue(%q, %q): Place %+v at the head, want AheadRemaining 0", key, waiter, p)
	}
	return p
}

// wantAhead fails unless waiter's place (renewing it for ttl) is ahead.
func wantAhead(t *testing.T, q backend.Queuer, key, waiter string, ttl time.Duration, ahead int) backend.Place {
	t.Helper()
	p := enqueue(t, q, key, waiter, ttl)
	if p.Ahead != ahead {
		t.Fatalf("Enqueue(%q, %q) = %+v, want Ahead %d", key, waiter, p, ahead)
	}
	return p
}

func dequeue(t *testing.T, q backend.Queuer, key, waiter string) {
	t.Helper()
	if err := q.Dequeue(context.Background(), key, waiter); err != nil {
		t.Fatalf("Dequeue(%q, %q): %v", key, waiter, err)
	}
}

// testQueueOrder: entries keep the order they joined in; renewing an entry
// keeps its place; a Dequeue lets the next be the head and is idempotent;
// the line is advisory (Grant does not read it).
func (s suite) testQueueOrder(t *testing.T) {
	b, q := s.queuer(t)
	const key = "queue-order"
	waiters := []string{"waiter-a", "waiter-b", "waiter-c", "waiter-d"}
	var first backend.Place
	for i, w := range waiters {
		p := wantAhead(t, q, key, w, long, i)
		if i == 0 {
			first = p
		}
		// The entry directly ahead was granted at most its TTL.
		if i > 0 && p.AheadRemaining > first.TTL {
			t.Fatalf("Enqueue(%q) = %+v, AheadRemaining above the entry ahead's TTL %v", w, p, first.TTL)
		}
	}
	// Renewing keeps the place, in any order.
	for _, i := range []int{2, 0, 3, 1} {
		wantAhead(t, q, key, waiters[i], long, i)
	}
	// A Dequeue of the head moves everyone up; of a middle entry, the ones
	// behind it.
	dequeue(t, q, key, waiters[0])
	wantAhead(t, q, key, waiters[1], long, 0)
	wantAhead(t, q, key, waiters[3], long, 2)
	dequeue(t, q, key, waiters[2])
	wantAhead(t, q, key, waiters[3], long, 1)
	// Removing an entry that is not in the line changes nothing.
	dequeue(t, q, key, waiters[0])
	dequeue(t, q, key, waiters[2])
	dequeue(t, q, key, "never-joined")
	dequeue(t, q, "queue-never-used", "never-joined")
	wantAhead(t, q, key, waiters[1], long, 0)
	wantAhead(t, q, key, waiters[3], long, 1)
	// A waiter that left and comes back joins at the end.
	wantAhead(t, q, key, waiters[0], long, 2)

	// The line is advisory: a grant outside it takes the free key.
	c := fencing.New(b)
	lease := s.grant(t, c, key, long, time.Second)
	wantLive(t, c, key, lease.Token)
	wantAhead(t, q, key, waiters[1], long, 0) // and the line is as it was
}

// testQueueRacingJoins: joins that race each get a distinct place, read in
// the same atomic step as the join, and keep it.
func (s suite) testQueueRacingJoins(t *testing.T) {
	_, q := s.queuer(t)
	const key = "queue-race"
	const n = 8
	places := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := q.Enqueue(context.Background(), key, fmt.Sprintf("racer-%d", i), long)
			places[i], errs[i] = p.Ahead, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("racing Enqueue: %v", err)
	}
	sorted := slices.Sorted(slices.Values(places))
	for i, a := range sorted {
		if a != i {
			t.Fatalf("racing Enqueue: places %v, want each of 0..%d once", places, n-1)
		}
	}
	for i := range n {
		wantAhead(t, q, key, fmt.Sprintf("racer-%d", i), long, places[i])
	}
}

// testQueueExpiry: an entry whose waiter stops renewing leaves the line when
// its TTL ends (AheadRemaining, when given, says when to look); a renewal
// before then keeps the place; a renewal after it puts the entry at the end.
func (s suite) testQueueExpiry(t *testing.T) {
	_, q := s.queuer(t)
	ttl := s.queueTTL()
	for attempt := 1; ; attempt++ {
		key := fmt.Sprintf("queue-expiry-%d", attempt)
		if s.queueExpiry(t, q, key, ttl) {
			return
		}
		if attempt == 5 {
			t.Fatalf("the renewal came back after the first TTL in %d attempts, the last with TTL %v", attempt, ttl)
		}
		ttl *= 2
	}
}

// queueExpiry runs testQueueExpiry's steps on key with entries of ttl. It
// returns false, proving nothing, when the renewal that should keep the
// place returned only after the first TTL could have ended (a loaded host):
// the entry may then rightly have expired, and the caller tries a longer TTL.
func (s suite) queueExpiry(t *testing.T, q backend.Queuer, key string, ttl time.Duration) bool {
	t.Helper()
	// Renewing in time keeps the place past the first TTL.
	joined := time.Now()
	p := wantAhead(t, q, key, "short", ttl, 0)
	wantAhead(t, q, key, "behind", long, 1)
	s.wait(t, p.TTL/2)
	renewed := time.Now()
	p = enqueue(t, q, key, "short", ttl)
	renewalReturned := time.Now()
	if p.Ahead != 0 {
		if s.traits.Now == nil && renewalReturned.Sub(joined) >= ttl {
			t.Logf("Enqueue(%q, %q) renewed %v after joining with TTL %v = %+v: too late to tell, trying a longer TTL",
				key, "short", renewalReturned.Sub(joined), ttl, p)
			return false
		}
		t.Fatalf("Enqueue(%q, %q) renewed %v after joining with TTL %v = %+v, want Ahead 0",
			key, "short", renewalReturned.Sub(joined), ttl, p)
	}
	if s.traits.Now != nil {
		s.wait(t, p.TTL-1) // the renewal's TTL, to the nanosecond
		wantAhead(t, q, key, "behind", long, 1)
		s.wait(t, 1)
	} else {
		// Past the first TTL, well before the renewal's.
		s.wait(t, max(p.TTL*3/4-time.Since(renewed), 0))
		asked := time.Now()
		got := enqueue(t, q, key, "behind", long)
		if time.Since(renewed) < p.TTL && got.Ahead != 1 {
			t.Fatalf("Enqueue behind an entry renewed %v before (TTL %v, first joined %v before) = %+v, want Ahead 1",
				asked.Sub(renewed), p.TTL, asked.Sub(joined), got)
		}
		if got.Ahead == 1 {
			s.waitForLeave(t, q, key, "behind", got, renewalReturned, p.TTL)
		}
	}

	// Expired: the entry behind is the head, and the expired one, renewed,
	// joins at the end.
	wantAhead(t, q, key, "behind", long, 0)
	wantAhead(t, q, key, "short", ttl, 1)
	wantAhead(t, q, key, "third", long, 2)
	return true
}

// waitForLeave waits until the entry ahead of waiter (whose last renewal,
// for ttl, returned at renewed) has certainly expired, as a waiter would:
// for AheadRemaining when the backend gives it, which must then cover the
// entry's time left, else for the rest of the TTL; then the backend's Slack.
func (s suite) waitForLeave(t *testing.T, q backend.Queuer, key, waiter string, p backend.Place, renewed time.Time, ttl time.Duration) {
	t.Helper()
	left := ttl - time.Since(renewed)
	if p.AheadRemaining > 0 {
		if p.AheadRemaining > ttl {
			t.Fatalf("Enqueue(%q) = %+v: AheadRemaining above the entry ahead's TTL %v", waiter, p, ttl)
		}
		left = p.AheadRemaining
	}
	s.wait(t, max(left, 0)+s.traits.Slack)
}

// testQueueNotifyTurn: the waiter behind an entry that is dequeued is woken;
// a subscription made before the waiter joins sees the leave. Expiry need
// not wake anyone (a store that runs no timers cannot see it: the waiter
// looks again after AheadRemaining), so it is not required here.
func (s suite) testQueueNotifyTurn(t *testing.T) {
	_, q := s.queuer(t)
	ctx := context.Background()
	const key = "queue-turn"
	enqueue(t, q, key, "first", long)
	// Subscribe, then join, as package fencing does.
	second, err := q.NotifyTurn(ctx, key, "second")
	if err != nil {
		t.Fatalf("NotifyTurn: %v", err)
	}
	defer second.Close()
	wantAhead(t, q, key, "second", long, 1)
	third, err := q.NotifyTurn(ctx, key, "third")
	if err != nil {
		t.Fatalf("NotifyTurn: %v", err)
	}
	defer third.Close()
	wantAhead(t, q, key, "third", long, 2)
	other, err := q.NotifyTurn(ctx, key+"-other", "second")
	if err != nil {
		t.Fatalf("NotifyTurn on another key: %v", err)
	}
	defer other.Close()

	// The Dequeue comes right after the subscriptions are in place: it
	// must not be missed.
	dequeue(t, q, key, "first")
	wantWake(t, second, "of the waiter behind a dequeued entry")
	wantAhead(t, q, key, "second", long, 0)
	woken := false
	select {
	case <-third.Freed():
		woken = true
	default:
	}
	if woken {
		t.Logf("the waiter two places behind was woken too (allowed: wake-ups may be spurious)")
	}
	drain(third)
	dequeue(t, q, key, "second")
	wantWake(t, third, "of the waiter behind a dequeued entry")
	wantAhead(t, q, key, "third", long, 0)

	for i, sub := range []backend.Subscription{second, third, other} {
		if err := sub.Close(); err != nil {
			t.Fatalf("Close of subscription %d: %v", i, err)
		}
		if err := sub.Close(); err != nil {
			t.Fatalf("second Close of subscription %d: %v", i, err)
		}
	}
}

// testQueueKeysIndependent: lines on different keys do not see each other,
// the same waiter ID included.
func (s suite) testQueueKeysIndependent(t *testing.T) {
	_, q := s.queuer(t)
	wantAhead(t, q, "queue-a", "w1", long, 0)
	wantAhead(t, q, "queue-b", "w2", long, 0)
	wantAhead(t, q, "queue-b", "w1", long, 1)
	wantAhead(t, q, "queue-a", "w2", long, 1)
	wantAhead(t, q, "queue-a/", "w3", long, 0) // a prefix is another key
	wantAhead(t, q, "queue-", "w3", long, 0)
	dequeue(t, q, "queue-a", "w1")
	wantAhead(t, q, "queue-a", "w2", long, 0)
	wantAhead(t, q, "queue-b", "w2", long, 0)
	wantAhead(t, q, "queue-b", "w1", long, 1)
}

// testQueueLineLength: a backend.LineReader counts a key's live entries: a
// renewal or another key's line does not add one, a Dequeue and an expiry
// take one away; a bad key gets its typed error.
func (s suite) testQueueLineLength(t *testing.T) {
	b, q := s.queuer(t)
	lr := capability[backend.LineReader](t, b, "backend.LineReader")
	const key = "queue-length"
	wantLength(t, lr, key, 0)
	for i, w := range []string{"a", "b", "c"} {
		enqueue(t, q, key, w, long)
		wantLength(t, lr, key, i+1)
	}
	enqueue(t, q, key, "a", long)
	enqueue(t, q, key+"-other", "a", long)
	wantLength(t, lr, key, 3)
	dequeue(t, q, key, "b")
	wantLength(t, lr, key, 2)

	ttl := s.queueTTL()
	sent := time.Now()
	p := enqueue(t, q, key, "short", ttl)
	returned := time.Now()
	if n := lineLength(t, lr, key); n != 3 && (s.traits.Now != nil || time.Since(sent) < ttl) {
		t.Fatalf("LineLength(%q) = %d right after a join, want 3", key, n)
	}
	left := p.TTL
	if s.traits.Now == nil {
		left -= time.Since(returned)
	}
	s.wait(t, max(left, 0)+s.traits.Slack)
	wantLength(t, lr, key, 2)

	for _, k := range []string{"", strings.Repeat("k", backend.MaxKeyLength+1)} {
		_, err := lr.LineLength(context.Background(), k)
		wantErr(t, "LineLength with a bad key", err, backend.ErrInvalidKey)
	}
}

func lineLength(t *testing.T, lr backend.LineReader, key string) int {
	t.Helper()
	n, err := lr.LineLength(context.Background(), key)
	if err != nil {
		t.Fatalf("LineLength(%q): %v", key, err)
	}
	return n
}

func wantLength(t *testing.T, lr backend.LineReader, key string, want int) {
	t.Helper()
	if n := lineLength(t, lr, key); n != want {
		t.Fatalf("LineLength(%q) = %d, want %d", key, n, want)
	}
}

// testQueueBadInput: a malformed key, waiter ID or TTL gets its typed error
// and changes nothing.
func (s suite) testQueueBadInput(t *testing.T) {
	_, q := s.queuer(t)
	ctx := context.Background()
	const key = "queue-bad"
	wantAhead(t, q, key, "good", long, 0) // never renewed again

	longKey := strings.Repeat("k", backend.MaxKeyLength+1)
	longID := strings.Repeat("w", backend.MaxLeaseIDLength+1)
	bad := []struct {
		what        string
		key, waiter string
		ttl         time.Duration
		want        error
	}{
		{"an empty key", "", "bad", long, backend.ErrInvalidKey},
		{"an overlong key", longKey, "bad", long, backend.ErrInvalidKey},
		{"an empty waiter ID", key, "", long, backend.ErrLeaseNotFound},
		{"an overlong waiter ID", key, longID, long, backend.ErrLeaseNotFound},
		{"a zero TTL", key, "bad", 0, backend.ErrInvalidTimeout},
		{"a negative TTL", key, "bad", -time.Second, backend.ErrInvalidTimeout},
		{"a TTL below the minimum", key, "bad", backend.MinTimeout - 1, backend.ErrInvalidTimeout},
		{"a TTL above the maximum", key, "bad", backend.MaxDuration + 1, backend.ErrInvalidTimeout},
	}
	wantAhead(t, q, key, "probe", long, 1)
	for _, c := range bad {
		_, err := q.Enqueue(ctx, c.key, c.waiter, c.ttl)
		wantErr(t, "Enqueue with "+c.what, err, c.want)
		// A bad renewal of a live entry changes it not either.
		if c.key == key && c.waiter == "bad" {
			_, err := q.Enqueue(ctx, key, "good", c.ttl)
			wantErr(t, "Enqueue renewing with "+c.what, err, c.want)
		}
		wantAhead(t, q, key, "probe", long, 1) // "good" is still ahead
	}
	for _, k := range []string{"", longKey} {
		wantErr(t, "Dequeue with a bad key", q.Dequeue(ctx, k, "good"), backend.ErrInvalidKey)
		sub, err := q.NotifyTurn(ctx, k, "good")
		if err == nil {
			sub.Close()
		}
		wantErr(t, "NotifyTurn with a bad key", err, backend.ErrInvalidKey)
	}
	// A malformed waiter ID cannot be in the line: its Dequeue removes
	// nothing, with nil or ErrLeaseNotFound.
	for _, id := range []string{"", longID} {
		if err := q.Dequeue(ctx, key, id); err != nil && !errors.Is(err, backend.ErrLeaseNotFound) {
			t.Fatalf("Dequeue with a malformed waiter ID: %v, want nil or ErrLeaseNotFound", err)
		}
	}
	// Nothing changed: "good" is the head, "bad" never joined.
	wantAhead(t, q, key, "probe", long, 1)
	wantAhead(t, q, key, "bad", long, 2)
	if s.traits.Now != nil {
		// The failed renewals neither shortened good's entry nor
		// lengthened it: it ends a minute after its one good join.
		s.wait(t, long-1)
		wantAhead(t, q, key, "probe", long, 1)
		s.wait(t, 1)
		wantAhead(t, q, key, "probe", long, 0)
	}
}

// testQueueDoneContext: a done context gets its error and changes nothing.
func (s suite) testQueueDoneContext(t *testing.T) {
	_, q := s.queuer(t)
	const key = "queue-ctx"
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	wantAhead(t, q, key, "first", long, 0)
	for _, ctx := range []context.Context{canceled, expired} {
		want := ctx.Err()
		_, err := q.Enqueue(ctx, key, "late", long)
		wantErr(t, "Enqueue with a done context", err, want)
		wantErr(t, "Dequeue with a done context", q.Dequeue(ctx, key, "first"), want)
		sub, err := q.NotifyTurn(ctx, key, "late")
		if err == nil {
			sub.Close()
		}
		wantErr(t, "NotifyTurn with a done context", err, want)
	}
	wantAhead(t, q, key, "first", long, 0)
	wantAhead(t, q, key, "second", long, 1)
}

// testQueueClosed: after Close the Queuer's calls return ErrClosed.
func (s suite) testQueueClosed(t *testing.T) {
	b, err := s.h.NewBackend(context.Background(), t)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	q, ok := b.(backend.Queuer)
	if !ok {
		b.Close()
		t.Skip("optional capability: the backend does not implement backend.Queuer")
	}
	ctx := context.Background()
	wantAhead(t, q, "queue-closed", "first", long, 0)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err = q.Enqueue(ctx, "queue-closed", "second", long)
	wantErr(t, "Enqueue after Close", err, backend.ErrClosed)
	wantErr(t, "Dequeue after Close", q.Dequeue(ctx, "queue-closed", "first"), backend.ErrClosed)
	sub, err := q.NotifyTurn(ctx, "queue-closed", "second")
	if err == nil {
		sub.Close()
	}
	wantErr(t, "NotifyTurn after Close", err, backend.ErrClosed)
}
