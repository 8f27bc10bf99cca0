package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
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
// so a Dequeue wakes the one waiter behind it, not the whole line, and a
// waiter's own join does not wake it unless it is at the head.
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
	// A waiter's own join wakes it only at the head: the others' Enqueue
	// counted the entries ahead.
	wantWake(t, subs[0], 5*time.Second, "the head's own join")
	for i := 1; i < len(subs); i++ {
		wantNoWake(t, subs[i], 100*time.Millisecond, "a waiter's own join behind another")
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

// TestCountOnlyCountsTheWholeRange is why Enqueue does not count the entries
// ahead with WithCountOnly and WithMaxCreateRev, as one might: etcd applies
// the revision filters to the keys it returns, and a count-only range
// returns none, so the count is of the whole range (docs/etcd.md).
func TestCountOnlyCountsTheWholeRange(t *testing.T) {
	cli := etcdtest.Client(t)
	prefix := newPrefix("count")
	ctx := context.Background()
	var first int64
	for i := range 3 {
		resp, err := cli.Put(ctx, prefix+string(rune('a'+i)), "")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = resp.Header.Revision
		}
	}
	counted, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithMaxCreateRev(first))
	if err != nil {
		t.Fatal(err)
	}
	listed, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(first))
	if err != nil {
		t.Fatal(err)
	}
	if counted.Count != 3 || len(listed.Kvs) != 1 {
		t.Fatalf("count-only with a create-revision filter counted %d, the filtered range has %d keys; want 3 and 1 (etcd's behaviour changed: Enqueue could count the entries ahead in one step)", counted.Count, len(listed.Kvs))
	}
}

// TestNotifyTurnLeaderStopped: a waiter on a follower keeps its place and
// its subscription while the leader is stopped, and is woken by the Dequeue
// of the entry ahead once a new leader is elected.
func TestNotifyTurnLeaderStopped(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	leader, err := cl.WaitLeader(ctx)
	elected := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	var on []*etcdtest.Member
	for _, m := range cl.Members {
		if m != leader {
			on = append(on, m)
		}
	}
	prefix := newPrefix("leader")
	first := backendOn(t, etcdtest.NewClient(t, on[0].Endpoints()), prefix).(*etcdbackend.Backend)
	second := backendOn(t, etcdtest.NewClient(t, on[1].Endpoints()), prefix).(*etcdbackend.Backend)
	mustEnqueue(t, first, "k", "first", time.Minute)
	s := notifyTurn(t, second, "k", "second")
	if p := mustEnqueue(t, second, "k", "second", time.Minute); p.Ahead != 1 {
		t.Fatalf("Enqueue = %+v, want Ahead 1", p)
	}
	leader.Stop()
	ctx = afterElection(t, elected)
	if _, err := cl.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	drain(s) // a wake-up of the broken watch
	for {
		err := first.Dequeue(ctx, "k", "first")
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrOutcomeUnknown) || ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		wantWake(t, s, 10*time.Second, "the Dequeue ahead, under the new leader")
		if p := mustEnqueue(t, second, "k", "second", time.Minute); p.Ahead == 0 {
			return
		}
	}
}

// TestEnqueueAfterAnotherDequeued: a backend remembers the etcd lease of
// the entries it made, to renew them in one round trip; an entry removed
// through another backend (another process) meanwhile is not renewed by
// that memory: the waiter joins at the end.
func TestEnqueueAfterAnotherDequeued(t *testing.T) {
	cli := etcdtest.Client(t)
	a, prefix := newBackend(t, cli)
	other := backendOn(t, cli, prefix).(*etcdbackend.Backend)
	mustEnqueue(t, a, "k", "x", time.Minute)
	mustEnqueue(t, a, "k", "w", time.Minute)
	if err := other.Dequeue(context.Background(), "k", "w"); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, other, "k", "y", time.Minute) // perhaps on w's etcd lease, from other's pool
	if p := mustEnqueue(t, a, "k", "w", time.Minute); p.Ahead != 2 {
		t.Fatalf("Enqueue of an entry dequeued elsewhere = %+v, want Ahead 2: at the end, behind x and y", p)
	}
	if p := mustEnqueue(t, a, "k", "w", time.Minute); p.Ahead != 2 {
		t.Fatalf("Enqueue renewing it = %+v, want Ahead 2", p)
	}
}

// TestNotifyTurnClose: Close of the backend closes every turn's channel and
// leaves no goroutine behind (the turns' and Enqueue's keep-alives).
func TestNotifyTurnClose(t *testing.T) {
	cli := etcdtest.Client(t)
	if _, err := cli.Get(context.Background(), "warm-up"); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()
	b, err := etcdbackend.New(context.Background(), cli, etcdbackend.WithPrefix(newPrefix("turn-close")))
	if err != nil {
		t.Fatal(err)
	}
	var subs []backend.Subscription
	for i := range 3 {
		w := fmt.Sprint("w", i)
		s, err := b.NotifyTurn(context.Background(), "k", w)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
		mustEnqueue(t, b, "k", w, time.Minute)
		mustEnqueue(t, b, "k", w, time.Minute) // a renewal through the remembered etcd lease
	}
	subs[0].Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for i, s := range subs {
		timeout := time.After(5 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-s.Freed():
				if !ok {
					break drain
				}
			case <-timeout:
				t.Fatalf("turn %d: Freed still open after the backend closed", i)
			}
		}
	}
	if err := goleak.Find(ignore); err != nil {
		t.Fatalf("goroutines left after Close: %v", err)
	}
}

// afterElection is the context for what a cluster test does once it has
// stopped the leader: a bound of its own, from what this host took to elect
// the first leader (elected). A bound shared with the start-up can be spent
// before the leader stops on a loaded host (CI: 'etcdtest: no leader:
// context deadline exceeded' 31 s into TestNotifyTurnLeaderStopped).
func afterElection(t *testing.T, elected time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), max(30*time.Second, 4*elected))
	t.Cleanup(cancel)
	return ctx
}
