package etcdbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/etcdtest"
)

// The line's behaviour is the conformance suite's (Queue*); these tests check
// what etcd adds: a handoff wakes only the waiter directly behind, and an
// entry's expiry wakes it too.

func mustEnqueue(t testing.TB, q backend.Queuer, key, waiter string, ttl time.Duration) backend.Place {
	t.Helper()
	p, err := q.Enqueue(context.Background(), key, waiter, ttl)
	if err != nil {
		t.Fatalf("Enqueue(%q, %q): %v", key, waiter, err)
	}
	return p
}

func notifyTurn(t testing.TB, b *etcdbackend.Backend, key, waiter string) backend.Subscription {
	t.Helper()
	s, err := b.NotifyTurn(context.Background(), key, waiter)
	if err != nil {
		t.Fatalf("NotifyTurn(%q, %q): %v", key, waiter, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// wantNoWake fails if s gets a wake-up within d.
func wantNoWake(t testing.TB, s backend.Subscription, d time.Duration, what string) {
	t.Helper()
	select {
	case <-s.Freed():
		t.Fatalf("%s: woken, want no wake-up", what)
	case <-time.After(d):
	}
}

// TestNotifyTurnWakesOnlyNext: each waiter watches the entry directly ahead,
// so a Dequeue wakes the one waiter behind it, not the whole line.
func TestNotifyTurnWakesOnlyNext(t *testing.T) {
	cli := etcdtest.Client(t)
	b, _ := newBackend(t, cli)
	waiters := []string{"w0", "w1", "w2", "w3"}
	var subs []backend.Subscription
	for i, w := range waiters {
		subs = append(subs, notifyTurn(t, b, "k", w))
		if p := mustEnqueue(t, b, "k", w, time.Minute); p.Ahead != i {
			t.Fatalf("Enqueue(%q) = %+v, want Ahead %d", w, p, i)
		}
	}
	// The subscriptions saw their own entries appear: start from quiet.
	time.Sleep(200 * time.Millisecond)
	for _, s := range subs {
		drain(s)
	}
	for i := range len(waiters) - 1 {
		if err := b.Dequeue(context.Background(), "k", waiters[i]); err != nil {
			t.Fatal(err)
		}
		wantWake(t, subs[i+1], 5*time.Second, "the waiter behind a Dequeue")
		for j := i + 2; j < len(waiters); j++ {
			wantNoWake(t, subs[j], 100*time.Millisecond, "a waiter further behind")
		}
		if p := mustEnqueue(t, b, "k", waiters[i+1], time.Minute); p.Ahead != 0 {
			t.Fatalf("Enqueue(%q) after the one ahead left = %+v, want the head", waiters[i+1], p)
		}
	}
}

// TestNotifyTurnSeesExpiry: an entry whose waiter stopped renewing is
// deleted by etcd's revoke, and that wakes the waiter behind, which is then
// the head.
func TestNotifyTurnSeesExpiry(t *testing.T) {
	cli := etcdtest.Client(t)
	b, _ := newBackend(t, cli)
	mustEnqueue(t, b, "k", "dead", etcdtest.MinTTL)
	s := notifyTurn(t, b, "k", "alive")
	if p := mustEnqueue(t, b, "k", "alive", time.Minute); p.Ahead != 1 {
		t.Fatalf("Enqueue = %+v, want Ahead 1", p)
	}
	joined := time.Now()
	for {
		wantWake(t, s, etcdtest.MinTTL+5*time.Second, "the expiry of the entry ahead")
		if p := mustEnqueue(t, b, "k", "alive", time.Minute); p.Ahead == 0 {
			break
		}
		if time.Since(joined) > etcdtest.MinTTL+5*time.Second {
			t.Fatal("the expired entry ahead never left")
		}
	}
}
