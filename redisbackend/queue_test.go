package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
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
	untilFastEnough(t, 600*time.Millisecond, func(key string, ttl time.Duration) (took time.Duration) {
		start := time.Now()
		for _, id := range []string{"d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8"} {
			mustEnqueue(t, b, key, id, ttl) // and never again: dead
		}
		p := mustEnqueue(t, b, key, "live", time.Minute)
		if took := time.Since(start); took > ttl/2 {
			return took
		}
		wantAhead(t, p, 8, "the live waiter")
		if p.AheadRemaining <= 0 || p.AheadRemaining > ttl {
			t.Fatalf("AheadRemaining = %v, want in (0, %v]: an entry's end is its own TTL, not the line's", p.AheadRemaining, ttl)
		}
		time.Sleep(p.AheadRemaining + time.Millisecond)
		wantAhead(t, mustEnqueue(t, b, key, "live", time.Minute), 0, "the live waiter once the entry ahead ran out")
		return 0
	})
}

// untilFastEnough runs scenario on a fresh key with ttl, and again with
// twice the TTL while it reports (took > 0) that this host was too slow
// for its TTL: a step that took more than the TTL allowed for (a loaded
// host's round trips, a late wake from sleep), so its entries could run out
// where the scenario needs them live. Seen at load 35-50: eight Enqueues
// taking longer than a 600 ms TTL.
func untilFastEnough(t *testing.T, ttl time.Duration, scenario func(key string, ttl time.Duration) (took time.Duration)) {
	t.Helper()
	for try := 0; ; try++ {
		took := scenario(fmt.Sprintf("k%d", try), ttl)
		if took == 0 {
			return
		}
		if try == 5 {
			t.Fatalf("this host took %v for a step of a scenario with TTL %v, five times over", took, ttl)
		}
		t.Logf("a step took %v, too long for TTL %v on this host: again with %v", took, ttl, 2*ttl)
		ttl *= 2
	}
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
	untilFastEnough(t, 400*time.Millisecond, func(key string, ttl time.Duration) (took time.Duration) {
		sub := mustTurn(t, b, key, "b")
		mustEnqueue(t, b, key, "a", ttl)
		mustEnqueue(t, b, key, "b", ttl)
		last := time.Now() // a's and b's latest renewal began no earlier
		for end := time.Now().Add(4 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
			if took := time.Since(last); took > ttl/2 {
				return took
			}
			last = time.Now()
			mustEnqueue(t, b, key, "a", ttl)
			p := mustEnqueue(t, b, key, "b", ttl)
			if took := time.Since(last); took > ttl/2 {
				return took
			}
			wantAhead(t, p, 1, "b, renewing, ten TTLs into its wait")
		}
		mustDequeue(t, b, key, "a")
		wantWake(t, sub, "for b after a left")
		wantAhead(t, mustEnqueue(t, b, key, "b", ttl), 0, "b after a left")

		// c stalls past its TTL behind b; d joins meanwhile.
		mustEnqueue(t, b, key, "c", ttl)
		time.Sleep(ttl + 10*time.Millisecond)
		last = time.Now()
		mustEnqueue(t, b, key, "b", ttl)
		mustEnqueue(t, b, key, "d", ttl)
		p := mustEnqueue(t, b, key, "c", ttl)
		if took := time.Since(last); took > ttl/2 {
			return took
		}
		wantAhead(t, p, 2, "c back after its entry ran out: at the end, behind b and d")
		return 0
	})
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
// this process measures it. a's entry is made between the send of its
// Enqueue and its answer, so it is live for an Enqueue answered within the
// TTL after that send, and gone for one sent a TTL after that answer. A
// host too slow to answer b's Enqueues within the TTL cannot judge the
// first: then the line is tried again, on a new key, with twice the TTL.
func TestLineServerClockFarOff(t *testing.T) {
	for _, offset := range []time.Duration{3 * time.Hour, -5 * time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			cfg := persistent
			cfg.Env = redistest.ClockShim(t, offset)
			srv := redistest.Start(t, cfg)
			b := newBackend(t, srv.Client())
			for ttl := 500 * time.Millisecond; ; ttl *= 2 {
				late := lineAcrossTTL(t, b, fmt.Sprint("k-", ttl), ttl)
				if late == 0 {
					return
				}
				if ttl >= 8*time.Second {
					t.Fatalf("TTL %v: b's Enqueue answered %v after a's entry could have ended: the host is too slow to judge", ttl, late)
				}
				t.Logf("TTL %v: b's Enqueue answered %v after a's entry could have ended: again with twice the TTL", ttl, late)
			}
		})
	}
}

// lineAcrossTTL enqueues a with ttl and then b on key, and checks that b is
// behind a until a's TTL passes and at the head after. It returns how late
// an answer that had to come within the TTL came (0: in time, judged).
func lineAcrossTTL(t *testing.T, b *redisbackend.Backend, key string, ttl time.Duration) time.Duration {
	t.Helper()
	sent := time.Now()
	mustEnqueue(t, b, key, "a", ttl)
	answered := time.Now()
	p := mustEnqueue(t, b, key, "b", time.Minute)
	if late := time.Since(sent.Add(ttl)); late > 0 {
		return late
	}
	wantAhead(t, p, 1, "b")
	if p.AheadRemaining <= 0 || p.AheadRemaining > ttl {
		t.Fatalf("AheadRemaining = %v, want in (0, %v]", p.AheadRemaining, ttl)
	}
	time.Sleep(time.Until(sent.Add(ttl - 150*time.Millisecond)))
	p = mustEnqueue(t, b, key, "b", time.Minute)
	if late := time.Since(sent.Add(ttl)); late > 0 {
		return late
	}
	wantAhead(t, p, 1, "b before a's TTL passed")
	time.Sleep(time.Until(answered.Add(ttl + time.Millisecond)))
	wantAhead(t, mustEnqueue(t, b, key, "b", time.Minute), 0, "b after a's TTL passed")
	return 0
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

// TestLineTurnAfterReconnect: a waiter's turn channel rides the shared
// pub/sub connection, so when that connection breaks (a message may be
// lost) the waiter is woken to look again, and once the backend has
// subscribed again the next Dequeue reaches it.
func TestLineTurnAfterReconnect(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	sub := mustTurn(t, b, "k", "b")
	mustEnqueue(t, b, "k", "a", time.Minute)
	mustEnqueue(t, b, "k", "b", time.Minute)
	if err := client.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	wantWake(t, sub, "for b after its pub/sub connection broke")
	waitNumSub(t, client, false, b.TurnChannel("k", "b"), 1)
	drain(sub)
	mustDequeue(t, b, "k", "a")
	wantWake(t, sub, "for b after a left, on the new connection")
}

// TestLineRandomHistory: waiters on three clients follow the protocol of
// fencing's WithFIFO (subscribe, join, look again on a wake-up, at
// AheadRemaining or to renew), and at random some die at the head without
// leaving, some die right after joining, the rest leave with Dequeue. A
// dedicated checker holds the history to the line's promises: the live
// waiters reach the head exactly in join order; after a clean leave the
// next is at the head within a pub/sub hop (far less than the renewal
// interval, at which a lost wake-up would show); after a death, by the
// dead entry's end (its last renewal + TTL) plus that hop.
func TestLineRandomHistory(t *testing.T) {
	srv := redistest.Start(t, persistent)
	var bs []*redisbackend.Backend
	for range 3 {
		bs = append(bs, newBackend(t, srv.Client()))
	}
	const (
		n     = 12
		ttl   = 2500 * time.Millisecond
		renew = 2 * time.Second
		// A wake-up is a pub/sub hop and an Enqueue (a few milliseconds);
		// a lost one would wait for the renewal, two seconds. The bound
		// allows for a machine shared with other test runs.
		hop = 700 * time.Millisecond
	)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(uint64(seed), 0))
	const (
		leaves = iota
		diesAtHead
		diesWaiting
	)
	fate := make([]int, n)
	hold := make([]time.Duration, n)
	for i := range fate {
		switch r := rnd.IntN(10); {
		case r < 2:
			fate[i] = diesAtHead
		case r < 3:
			fate[i] = diesWaiting
		}
		hold[i] = time.Duration(rnd.IntN(20)) * time.Millisecond
	}
	fate[n-1] = leaves // so the last one's end is seen
	t.Logf("fates %v (0 leaves, 1 dies at the head, 2 dies waiting)", fate)
	// head: when the waiter saw itself at the head; end: its Dequeue or
	// death at the head; due: when its entry ends at the latest.
	head, end, due := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	ctx := context.Background()
	start := make(chan struct{})
	for i := range n {
		b := bs[i%len(bs)]
		id := fmt.Sprintf("w%02d", i)
		sub := mustTurn(t, b, "k", id)
		wantAhead(t, mustEnqueue(t, b, "k", id, ttl), i, id) // joins in order i
		due[i] = time.Now().Add(ttl)
		if fate[i] == diesWaiting {
			continue // never looks, renews or leaves again
		}
		wg.Go(func() {
			<-start
			for {
				p, err := b.Enqueue(ctx, "k", id, ttl)
				if err != nil {
					errs <- err
					return
				}
				due[i] = time.Now().Add(ttl)
				if p.Ahead == 0 {
					head[i] = time.Now()
					time.Sleep(hold[i])
					end[i] = time.Now()
					if fate[i] == diesAtHead {
						return // no Dequeue, no more renewals
					}
					errs <- b.Dequeue(ctx, "k", id)
					return
				}
				wait := renew
				if p.AheadRemaining > 0 && p.AheadRemaining < wait {
					wait = p.AheadRemaining + time.Millisecond
				}
				select {
				case <-sub.Freed():
				case <-time.After(wait):
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// free is when the entries ahead of the next live waiter were gone at
	// the latest: the last live one's end, or a dead one's due time.
	var free time.Time
	prev := -1 // the last live waiter
	for i := range n {
		if fate[i] == diesWaiting {
			free = later(free, due[i])
			continue
		}
		if head[i].IsZero() {
			t.Fatalf("w%02d never reached the head", i)
		}
		if prev >= 0 {
			if head[i].Before(end[prev]) {
				t.Fatalf("w%02d reached the head before w%02d, ahead of it, ended", i, prev)
			}
			if took := head[i].Sub(free); took > hop {
				t.Fatalf("w%02d reached the head %v after the entries ahead of it were gone, want at most %v", i, took, hop)
			} else {
				t.Logf("w%02d at the head %v after the entries ahead were gone", i, took.Round(time.Millisecond))
			}
		}
		// The next waiter may go once this one left: at its Dequeue, or
		// when its entry ran out after its death.
		if fate[i] == diesAtHead {
			free = due[i]
		} else {
			free = end[i]
		}
		prev = i
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestLineManyDeadEntries: a script drops every entry whose time ran out,
// however many (it removes them a thousand at a time), so Ahead counts
// live entries only.
func TestLineManyDeadEntries(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	const dead = 2500
	// Joined straight into the two sorted sets, ended a second ago on the
	// server's clock.
	base := strings.TrimSuffix(b.RedisKey("k"), ":token")
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	past := float64(now.Add(-time.Second).UnixMicro())
	pipe := client.Pipeline()
	for i := range dead {
		id := fmt.Sprintf("dead-%d", i)
		pipe.ZAdd(ctx, base+":line", redis.Z{Score: float64(i + 1), Member: id})
		pipe.ZAdd(ctx, base+":due", redis.Z{Score: past, Member: id})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	wantAhead(t, mustEnqueue(t, b, "k", "live", time.Minute), 0, "a waiter behind 2500 dead entries")
	if n := client.ZCard(ctx, base+":line").Val(); n != 1 {
		t.Fatalf("the line holds %d entries after one script, want 1", n)
	}
}
