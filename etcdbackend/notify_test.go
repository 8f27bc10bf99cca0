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

// subscribe subscribes to key's end, closing the subscription in cleanup.
func subscribe(t testing.TB, b *etcdbackend.Backend, key string) backend.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.NotifyFree(ctx, key)
	if err != nil {
		t.Fatalf("NotifyFree(%q): %v", key, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// drain reads a pending wake-up, if any.
func drain(s backend.Subscription) {
	select {
	case <-s.Freed():
	default:
	}
}

// wantWake waits up to d for a wake-up on s (not a closed channel).
func wantWake(t testing.TB, s backend.Subscription, d time.Duration, what string) {
	t.Helper()
	select {
	case _, ok := <-s.Freed():
		if !ok {
			t.Fatalf("%s: Freed closed, want a wake-up", what)
		}
	case <-time.After(d):
		t.Fatalf("%s: no wake-up in %v", what, d)
	}
}

// wantDeletion waits up to d for a wake-up on s once it has reported more
// than before deletions of its key: the wake-up of a release, which one
// for a broken watch cannot stand in for.
func wantDeletion(t testing.TB, s backend.Subscription, before int64, d time.Duration, what string) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-s.Freed():
			if !ok {
				t.Fatalf("%s: Freed closed, want a wake-up", what)
			}
			if etcdbackend.Deletions(s) > before {
				return
			}
		case <-timeout:
			t.Fatalf("%s: no wake-up for a deletion in %v (%d deletions reported)", what, d, etcdbackend.Deletions(s))
		}
	}
}

// TestNotifyFreeNoSetUpRace: a release, forced release or expiry right
// after NotifyFree returns is always seen: the watch is created first.
func TestNotifyFreeNoSetUpRace(t *testing.T) {
	endpoints := etcdtest.Endpoints(t)
	b, prefix := newBackend(t, etcdtest.NewClient(t, endpoints))
	// The holder has a connection of its own, so its release does not
	// queue behind the watch's creation.
	other, err := newWithPrefix(etcdtest.NewClient(t, endpoints), prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	for i := range 30 {
		key, id := fmt.Sprint("race", i), fmt.Sprint("A", i)
		mustGrant(t, other, req(key, id, time.Minute))
		s := subscribe(t, b, key)
		if i%2 == 0 {
			if err := other.Release(ctx, key, id); err != nil {
				t.Fatal(err)
			}
		} else if ended, err := other.ForceRelease(ctx, key); err != nil || !ended {
			t.Fatalf("ForceRelease = %v, %v", ended, err)
		}
		wantWake(t, s, 5*time.Second, fmt.Sprint("end ", i))
		s.Close()
	}
	// Expiry: etcd's revoke of the expired lease deletes the lease key.
	mustGrant(t, b, backend.Request{Key: "exp", LeaseID: "E", Timeout: 500 * time.Millisecond, Margin: 500 * time.Millisecond})
	s := subscribe(t, b, "exp")
	wantWake(t, s, 5*time.Second, "expiry")
	wantToken(t, b, "exp", 0, false)
}

// TestNotifyFreeSurvivesRestart: the watch outlives a restart of the server.
func TestNotifyFreeSurvivesRestart(t *testing.T) {
	m := etcdtest.Start(t, etcdtest.WithFsync())
	cli := etcdtest.NewClient(t, m.Endpoints())
	b, _ := newBackend(t, cli)
	mustGrant(t, b, req("k", "A", time.Minute))
	s := subscribe(t, b, "k")
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wantToken(t, b, "k", mustToken(t, b, "k"), true)
	before := etcdbackend.Deletions(s)
	if err := b.Release(ctx, "k", "A"); err != nil {
		t.Fatal(err)
	}
	wantDeletion(t, s, before, 10*time.Second, "release after restart")
}

func mustToken(t testing.TB, b backend.Backend, key string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, _, err := b.Token(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestNotifyFreeAfterCompaction: a watch cut off while a release happened,
// and the history compacted past it before the watch resumed, still wakes
// the waiter, and goes on to report the next release.
func TestNotifyFreeAfterCompaction(t *testing.T) {
	m := etcdtest.Start(t)
	direct := etcdtest.NewClient(t, m.Endpoints())
	p := etcdtest.StartProxy(t, m.ClientURL)
	b, prefix := newBackend(t, etcdtest.NewClient(t, p.Endpoints()))
	truth := backendOn(t, direct, prefix)
	ctx := context.Background()
	mustGrant(t, truth, req("k", "A", time.Minute))
	s := subscribe(t, b, "k")

	p.SetMode(etcdtest.Pause) // the watch hears nothing now
	if err := truth.Release(ctx, "k", "A"); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, truth, req("k", "B", time.Minute))
	resp, err := direct.Put(ctx, prefix+"filler", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	drain(s)
	p.Cut() // the held event is lost; the watch resumes past a compaction
	p.SetMode(etcdtest.Forward)
	wantWake(t, s, 10*time.Second, "after the compaction")

	before := etcdbackend.Deletions(s)
	if err := truth.Release(ctx, "k", "B"); err != nil {
		t.Fatal(err)
	}
	wantDeletion(t, s, before, 10*time.Second, "release after the compaction")
}

// TestNotifyFreeClose: closing subscriptions and the backend ends every
// goroutine; the backend's Close closes the channels still open.
func TestNotifyFreeClose(t *testing.T) {
	cli := etcdtest.Client(t)
	if _, err := cli.Get(context.Background(), "warm-up"); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()
	b, err := etcdbackend.New(context.Background(), cli, etcdbackend.WithPrefix(newPrefix("notify-close")))
	if err != nil {
		t.Fatal(err)
	}
	var subs []backend.Subscription
	for i := range 5 {
		s, err := b.NotifyFree(context.Background(), fmt.Sprint("k", i))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	subs[0].Close()
	subs[0].Close() // twice is fine
	if _, ok := <-subs[0].Freed(); ok {
		t.Fatal("Freed not closed after Close")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for i, s := range subs {
		select {
		case _, ok := <-s.Freed():
			if ok {
				t.Fatalf("subscription %d: a wake-up after the backend closed", i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("subscription %d: Freed still open after the backend closed", i)
		}
	}
	if _, err := b.NotifyFree(context.Background(), "k"); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("NotifyFree after Close: %v, want ErrClosed", err)
	}
	if err := goleak.Find(ignore); err != nil {
		t.Fatalf("goroutines left after Close: %v", err)
	}
}

// TestNotifyFreeTimesOut: NotifyFree's context bounds the set-up: with the
// server down it fails, and leaves nothing behind.
func TestNotifyFreeTimesOut(t *testing.T) {
	m := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, m.Endpoints())
	b, _ := newBackend(t, cli)
	m.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if s, err := b.NotifyFree(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NotifyFree with the server down = %v, %v; want DeadlineExceeded", s, err)
	}
	if err := b.Close(); err != nil { // would hang on a leaked subscription
		t.Fatal(err)
	}
}

// TestNotifyFreeLeaderStopped: a waiter on a follower keeps its subscription
// while the leader is stopped, and sees the release the holder makes once a
// new leader is elected.
func TestNotifyFreeLeaderStopped(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	leader, err := cl.WaitLeader(ctx)
	elected := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	var waiterOn, holderOn *etcdtest.Member
	for _, m := range cl.Members {
		if m == leader {
			continue
		}
		if waiterOn == nil {
			waiterOn = m
		} else {
			holderOn = m
		}
	}
	prefix := newPrefix("leader")
	holder := backendOn(t, etcdtest.NewClient(t, holderOn.Endpoints()), prefix)
	waiter, err := newWithPrefix(etcdtest.NewClient(t, waiterOn.Endpoints()), prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	mustGrant(t, holder, req("k", "A", time.Minute))
	s := subscribe(t, waiter, "k")

	leader.Stop()
	ctx = afterElection(t, elected)
	if _, err := cl.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	before := etcdbackend.Deletions(s)
	for {
		err := holder.Release(ctx, "k", "A")
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrOutcomeUnknown) && ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantDeletion(t, s, before, 10*time.Second, "release under the new leader")
}

// TestNotifyFreeWaitsForCreated: NotifyFree does not return before etcd has
// created the watch, even when that takes long (the subscriber's link is
// held up), so a release right after it returns is seen. (clientv3's Watch
// itself returns only after the server's created response; NotifyFree
// waits for it explicitly, for the start revision.)
func TestNotifyFreeWaitsForCreated(t *testing.T) {
	m := etcdtest.Start(t)
	p := etcdtest.StartProxy(t, m.ClientURL)
	b, prefix := newBackend(t, etcdtest.NewClient(t, p.Endpoints()))
	holder := backendOn(t, etcdtest.NewClient(t, m.Endpoints()), prefix)
	ctx := context.Background()
	mustToken(t, b, "k") // the subscriber's connection is up
	for i := range 3 {
		id := fmt.Sprint("A", i)
		mustGrant(t, holder, req("k", id, time.Minute))
		p.SetMode(etcdtest.Pause)
		time.AfterFunc(300*time.Millisecond, func() { p.SetMode(etcdtest.Forward) })
		s := subscribe(t, b, "k")
		if err := holder.Release(ctx, "k", id); err != nil {
			t.Fatal(err)
		}
		wantWake(t, s, 5*time.Second, fmt.Sprint("release ", i))
		s.Close()
	}
}
