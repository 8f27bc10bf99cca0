package redisbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// The line's Redis-specific behaviour: who is woken, and the failure modes
// that broke Redisson's RFairLock (each test names its issue). The
// contract of backend.Queuer itself is the conformance suite's.

func mustEnqueue(t *testing.T, b *redisbackend.Backend, key, id string, ttl time.Duration) backend.Place {
	t.Helper()
	p, err := b.Enqueue(context.Background(), key, id, ttl)
	if err != nil {
		t.Fatalf("Enqueue(%q, %q): %v", key, id, err)
	}
	return p
}

func mustDequeue(t *testing.T, b *redisbackend.Backend, key, id string) {
	t.Helper()
	if err := b.Dequeue(context.Background(), key, id); err != nil {
		t.Fatalf("Dequeue(%q, %q): %v", key, id, err)
	}
}

func mustTurn(t *testing.T, b *redisbackend.Backend, key, id string) backend.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := b.NotifyTurn(ctx, key, id)
	if err != nil {
		t.Fatalf("NotifyTurn(%q, %q): %v", key, id, err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

func wantAhead(t *testing.T, p backend.Place, ahead int, what string) {
	t.Helper()
	if p.Ahead != ahead {
		t.Fatalf("%s: Ahead = %d, want %d (%+v)", what, p.Ahead, ahead, p)
	}
}

// TestLineWakesOnlyTheNext: a leaver wakes the waiter directly behind it
// and nobody else, whether it left from the head or from the middle.
func TestLineWakesOnlyTheNext(t *testing.T) {
	srv := redistest.Start(t, persistent)
	b := newBackend(t, srv.Client())
	ids := []string{"a", "b", "c", "d"}
	subs := map[string]backend.Subscription{}
	for i, id := range ids {
		subs[id] = mustTurn(t, b, "k", id)
		wantAhead(t, mustEnqueue(t, b, "k", id, time.Minute), i, id)
	}
	mustDequeue(t, b, "k", "a")
	wantWake(t, subs["b"], "for b after a left the head")
	wantQuiet(t, subs["c"], "for c after a left")
	wantQuiet(t, subs["d"], "for d after a left")
	wantAhead(t, mustEnqueue(t, b, "k", "b", time.Minute), 0, "b after a left")

	mustDequeue(t, b, "k", "c")
	wantWake(t, subs["d"], "for d after c left the middle")
	wantQuiet(t, subs["b"], "for b after c left")
	wantAhead(t, mustEnqueue(t, b, "k", "d", time.Minute), 1, "d after c left")

	mustDequeue(t, b, "k", "c") // not in the line: nil, and nobody wakes
	wantQuiet(t, subs["d"], "for d after a second Dequeue of c")
}

// TestLineDeadWaitersLeaveTogether (Redisson #1353: every dead waiter ahead
// cost the live ones its own timeout, one after another, and #1104: a
// waiter's timeout was counted from the entries ahead of it, so it grew
// with the line). Here each entry ends on its own TTL from its last
// renewal: eight waiters that died at once in front of a live one are gone
// together one TTL later, and the live one's AheadRemaining is at most that
// TTL however long the line.
func TestLineDeadWaitersLeaveTogether(t *testing.T) {
	srv := redistest.Start(t, persistent)
	b := newBackend(t, srv.Client())
	const ttl = 600 * time.Millisecond
	for _, id := range []string{"d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8"} {
		mustEnqueue(t, b, "k", id, ttl) // and never again: dead
	}
	p := mustEnqueue(t, b, "k", "live", time.Minute)
	wantAhead(t, p, 8, "the live waiter")
	if p.AheadRemaining <= 0 || p.AheadRemaining > ttl {
		t.Fatalf("AheadRemaining = %v, want in (0, %v]: an entry's end is its own TTL, not the line's", p.AheadRemaining, ttl)
	}
	time.Sleep(p.AheadRemaining + time.Millisecond)
	wantAhead(t, mustEnqueue(t, b, "k", "live", time.Minute), 0, "the live waiter once the entry ahead ran out")
}

// TestLineExpiryWakesTheNext (Redisson #3730: a holder that died without
// unlocking left the next waiter waiting for a message that never came):
// the script that drops an entry whose time ran out (here another waiter's
// Enqueue) publishes to the waiter behind it; and with no script at all,
// that waiter's own AheadRemaining brings it back (the previous test).
func TestLineExpiryWakesTheNext(t *testing.T) {
	srv := redistest.Start(t, persistent)
	b := newBackend(t, srv.Client())
	const ttl = 300 * time.Millisecond
	mustEnqueue(t, b, "k", "dead", ttl)
	sub := mustTurn(t, b, "k", "next")
	p := mustEnqueue(t, b, "k", "next", time.Minute)
	wantAhead(t, p, 1, "next")
	time.Sleep(p.AheadRemaining + time.Millisecond)
	wantQuiet(t, sub, "before any script ran") // Redis sends no event on expiry
	wantAhead(t, mustEnqueue(t, b, "k", "other", time.Minute), 1, "a later waiter")
	wantWake(t, sub, "for next after a script dropped the dead entry ahead")
	wantAhead(t, mustEnqueue(t, b, "k", "next", time.Minute), 0, "next")
}

// TestLineLiveWaiterKeepsItsPlace (Redisson #3004: waiters that waited
// longer than a fixed wait time were dropped by the others while still
// alive, and then never heard the unlock): an entry lives as long as its
// waiter renews it, whatever the wait, and one whose waiter stalled past
// its TTL is put at the end again by its next Enqueue, never left out.
func TestLineLiveWaiterKeepsItsPlace(t *testing.T) {
	srv := redistest.Start(t, persistent)
	b := newBackend(t, srv.Client())
	const ttl = 400 * time.Millisecond
	sub := mustTurn(t, b, "k", "b")
	mustEnqueue(t, b, "k", "a", ttl)
	mustEnqueue(t, b, "k", "b", ttl)
	for end := time.Now().Add(4 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
		mustEnqueue(t, b, "k", "a", ttl)
		wantAhead(t, mustEnqueue(t, b, "k", "b", ttl), 1, "b, renewing, ten TTLs into its wait")
	}
	mustDequeue(t, b, "k", "a")
	wantWake(t, sub, "for b after a left")
	wantAhead(t, mustEnqueue(t, b, "k", "b", ttl), 0, "b after a left")

	// c stalls past its TTL behind b; d joins meanwhile.
	mustEnqueue(t, b, "k", "c", ttl)
	time.Sleep(ttl + 10*time.Millisecond)
	mustEnqueue(t, b, "k", "b", ttl)
	mustEnqueue(t, b, "k", "d", ttl)
	wantAhead(t, mustEnqueue(t, b, "k", "c", ttl), 2, "c back after its entry ran out: at the end, behind b and d")
}

// TestLineLostDequeue (Redisson #5019: a waiter whose unlock or cleanup
// call timed out left its entry in the queue for good): a Dequeue that
// never reaches the server leaves an entry that ends on its TTL, and the
// waiter behind, which hears nothing, looks again after AheadRemaining and
// is at the head; a Dequeue whose reply is lost did run, woke the next,
// and its resend returns nil.
func TestLineLostDequeue(t *testing.T) {
	srv := redistest.Start(t, persistent)
	p := startProxy(t, srv.Addr())
	cut := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cut.Close() })
	viaProxy := newBackend(t, cut)
	b := newBackend(t, srv.Client())
	const ttl = 500 * time.Millisecond

	t.Run("never sent", func(t *testing.T) {
		mustEnqueue(t, viaProxy, "lost", "a", ttl)
		sub := mustTurn(t, b, "lost", "b")
		pl := mustEnqueue(t, b, "lost", "b", time.Minute)
		wantAhead(t, pl, 1, "b")
		p.Partition()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := viaProxy.Dequeue(ctx, "lost", "a")
		cancel()
		p.Heal()
		if err == nil {
			t.Fatal("Dequeue through a partition succeeded")
		}
		wantQuiet(t, sub, "for b after a lost Dequeue")
		time.Sleep(pl.AheadRemaining + time.Millisecond)
		wantAhead(t, mustEnqueue(t, b, "lost", "b", time.Minute), 0, "b after a's entry ran out")
	})

	t.Run("reply lost", func(t *testing.T) {
		mustEnqueue(t, viaProxy, "reply", "a", time.Minute)
		sub := mustTurn(t, b, "reply", "b")
		wantAhead(t, mustEnqueue(t, b, "reply", "b", time.Minute), 1, "b")
		p.arm(faultDrop)
		err := viaProxy.Dequeue(context.Background(), "reply", "a")
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("Dequeue with its reply lost = %v, want ErrOutcomeUnknown", err)
		}
		wantWake(t, sub, "for b after a Dequeue whose reply was lost")
		if err := viaProxy.Dequeue(context.Background(), "reply", "a"); err != nil {
			t.Fatalf("resent Dequeue: %v", err)
		}
		wantAhead(t, mustEnqueue(t, b, "reply", "b", time.Minute), 0, "b")
	})
}

// TestLineServerClockFarOff (Redisson's fair lock counted queue timeouts
// from the client's clock): the line reads only the server's TIME, so a
// server hours ahead of or behind this process grants entries their TTL as
// this process measures it.
func TestLineServerClockFarOff(t *testing.T) {
	for _, offset := range []time.Duration{3 * time.Hour, -5 * time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			cfg := persistent
			cfg.Env = redistest.ClockShim(t, offset)
			srv := redistest.Start(t, cfg)
			b := newBackend(t, srv.Client())
			const ttl = 500 * time.Millisecond
			sent := time.Now()
			mustEnqueue(t, b, "k", "a", ttl)
			p := mustEnqueue(t, b, "k", "b", time.Minute)
			wantAhead(t, p, 1, "b")
			if p.AheadRemaining <= 0 || p.AheadRemaining > ttl {
				t.Fatalf("AheadRemaining = %v, want in (0, %v]", p.AheadRemaining, ttl)
			}
			time.Sleep(time.Until(sent.Add(ttl - 150*time.Millisecond)))
			wantAhead(t, mustEnqueue(t, b, "k", "b", time.Minute), 1, "b before a's TTL passed")
			time.Sleep(200 * time.Millisecond)
			wantAhead(t, mustEnqueue(t, b, "k", "b", time.Minute), 0, "b after a's TTL passed")
		})
	}
}

// TestLineSurvivesRestart: with the append-only file, a kill -9 and restart
// keep the line's order, and an entry whose TTL ended while the server was
// down is gone when it is back (its time is the server's clock, which ran
// on).
func TestLineSurvivesRestart(t *testing.T) {
	srv := redistest.Start(t, persistent)
	b := newBackend(t, srv.Client())
	const short = 300 * time.Millisecond
	mustEnqueue(t, b, "k", "a", time.Minute)
	mustEnqueue(t, b, "k", "short", short)
	mustEnqueue(t, b, "k", "b", time.Minute)
	mustEnqueue(t, b, "k", "c", time.Minute)
	srv.Kill()
	time.Sleep(short)
	srv.Restart()
	for i, id := range []string{"a", "b", "c"} {
		wantAhead(t, mustEnqueue(t, b, "k", id, time.Minute), i, id+" after the restart")
	}
}

// TestLineKeysExpire: the line's two keys expire with their last entry, so
// a line that all its waiters left without a word leaves nothing behind,
// and a Dequeue of the last entry deletes them at once.
func TestLineKeysExpire(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	lineKeys := func(key string) []string {
		base := strings.TrimSuffix(b.RedisKey(key), ":token")
		return []string{base + ":line", base + ":due"}
	}
	mustEnqueue(t, b, "gone", "a", 200*time.Millisecond)
	mustEnqueue(t, b, "gone", "b", 400*time.Millisecond)
	for _, k := range lineKeys("gone") {
		if ttl := client.PTTL(ctx, k).Val(); ttl <= 200*time.Millisecond || ttl > 400*time.Millisecond {
			t.Fatalf("PTTL(%s) = %v, want the last entry's time left (about 400ms)", k, ttl)
		}
	}
	time.Sleep(450 * time.Millisecond)
	if n := client.Exists(ctx, lineKeys("gone")...).Val(); n != 0 {
		t.Fatalf("%d of the line's keys exist after its last entry ran out", n)
	}
	mustEnqueue(t, b, "left", "a", time.Minute)
	mustDequeue(t, b, "left", "a")
	if n := client.Exists(ctx, lineKeys("left")...).Val(); n != 0 {
		t.Fatalf("%d of the line's keys exist after its last waiter left", n)
	}
}

// TestTurnChannelHidesWaiterID: a waiter's channel, which PUBSUB CHANNELS
// shows to any client, carries a hash of its ID, not the ID (a credential).
func TestTurnChannelHidesWaiterID(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	const id = "secret-waiter-id"
	mustTurn(t, b, "k", id)
	chans, err := client.PubSubChannels(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(chans) != 1 || strings.Contains(chans[0], id) || !strings.Contains(chans[0], ":turn:") {
		t.Fatalf("channels %q: want one turn channel without the waiter's ID", chans)
	}
}
