package redisbackend_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// channelOf is the channel a release of key publishes on.
func channelOf(b *redisbackend.Backend, key string) string {
	return strings.TrimSuffix(b.RedisKey(key), ":token") + ":free"
}

func mustNotify(t *testing.T, b *redisbackend.Backend, key string) backend.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := b.NotifyFree(ctx, key)
	if err != nil {
		t.Fatalf("NotifyFree(%q): %v", key, err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

func wantWake(t *testing.T, sub backend.Subscription, what string) {
	t.Helper()
	select {
	case _, ok := <-sub.Freed():
		if !ok {
			t.Fatalf("%s: Freed was closed, want a wake-up", what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake-up %s within 10s", what)
	}
}

func wantQuiet(t *testing.T, sub backend.Subscription, what string) {
	t.Helper()
	select {
	case <-sub.Freed():
		t.Fatalf("a wake-up %s, want none", what)
	case <-time.After(50 * time.Millisecond):
	}
}

// numSub returns how many connections the server counts on channel (PUBSUB
// NUMSUB, or SHARDNUMSUB for sharded channels).
func numSub(t *testing.T, c redis.UniversalClient, sharded bool, channel string) int64 {
	t.Helper()
	cmd := "numsub"
	if sharded {
		cmd = "shardnumsub"
	}
	v, err := c.Do(context.Background(), "pubsub", cmd, channel).Slice()
	if err != nil || len(v) != 2 {
		t.Fatalf("PUBSUB %s: %v, %v", cmd, v, err)
	}
	return v[1].(int64)
}

// waitNumSub waits until the server counts n subscribers on channel.
func waitNumSub(t *testing.T, c redis.UniversalClient, sharded bool, channel string, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for numSub(t, c, sharded, channel) != n {
		if time.Now().After(deadline) {
			t.Fatalf("the server counts %d subscribers on %q, want %d", numSub(t, c, sharded, channel), channel, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNotifySetUpRace: NotifyFree returns only once the server confirmed
// the subscription, so a release sent right after it on another connection
// (another backend and client) is always seen.
func TestNotifySetUpRace(t *testing.T) {
	srv := redistest.Start(t, persistent)
	waiter := newBackend(t, srv.Client())
	holder := newBackend(t, srv.Client())
	for i := range 200 {
		key := fmt.Sprintf("race-%d", i)
		mustGrant(t, holder, key, "id")
		sub := mustNotify(t, waiter, key)
		mustRelease(t, holder, key, "id")
		wantWake(t, sub, "after a release right after NotifyFree")
		sub.Close()
	}
}

// TestNotifySharing: waiters share one pub/sub connection, each key's
// channel is subscribed once however many wait on it and unsubscribed when
// the last closes, and a release wakes only its key's waiters.
func TestNotifySharing(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	var subs [3][4]backend.Subscription
	for k := range subs {
		for w := range subs[k] {
			subs[k][w] = mustNotify(t, b, fmt.Sprintf("k%d", k))
		}
	}
	ctx := context.Background()
	list, err := client.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(list, "flags=P"); n != 1 {
		t.Fatalf("%d pub/sub connections for 12 waiters on 3 keys, want 1:\n%s", n, list)
	}
	if n := numSub(t, client, false, channelOf(b, "k0")); n != 1 {
		t.Fatalf("PUBSUB NUMSUB = %d for 4 waiters on one key, want 1", n)
	}
	mustGrant(t, b, "k1", "id")
	mustRelease(t, b, "k1", "id")
	for w := range subs[1] {
		wantWake(t, subs[1][w], "after the release of k1")
	}
	wantQuiet(t, subs[0][0], "on k0 after the release of k1")
	for w := range subs[0] {
		if n := numSub(t, client, false, channelOf(b, "k0")); n != 1 {
			t.Fatalf("PUBSUB NUMSUB = %d with %d waiters left, want 1", n, len(subs[0])-w)
		}
		subs[0][w].Close()
	}
	waitNumSub(t, client, false, channelOf(b, "k0"), 0)
	// A grant is not a release, and a resent release publishes nothing.
	mustGrant(t, b, "k2", "id")
	wantQuiet(t, subs[2][0], "after a grant")
}

// TestNotifyReconnect: when the pub/sub connection breaks (the server kills
// it, or the server restarts), every waiter gets a wake-up and the backend
// subscribes again, so later releases are seen.
func TestNotifyReconnect(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	sub := mustNotify(t, b, "k")
	ctx := context.Background()
	check := func(what string) {
		t.Helper()
		wantWake(t, sub, what)
		waitNumSub(t, srv.Client(), false, channelOf(b, "k"), 1)
		drain(sub)
		mustGrant(t, b, "k", what)
		mustRelease(t, b, "k", what)
		wantWake(t, sub, "after a release "+what)
	}
	if err := client.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	check("after CLIENT KILL TYPE pubsub")
	srv.Restart()
	check("after a restart")
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

// TestNotifyClose: Close ends every subscription (Freed is closed), frees
// the pub/sub connection and leaves no goroutine.
func TestNotifyClose(t *testing.T) {
	srv := redistest.Start(t, persistent)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	b, err := redisbackend.New(context.Background(), client, redisbackend.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := b.NotifyFree(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	closed, err := b.NotifyFree(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	b.Close()
	if _, ok := <-a.Freed(); ok {
		t.Fatal("Freed still open after Close")
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Subscription.Close after Backend.Close: %v", err)
	}
	if _, err := b.NotifyFree(ctx, "a"); err == nil {
		t.Fatal("NotifyFree after Close succeeded")
	}
	waitNumSub(t, srv.Client(), false, channelOf(b, "a"), 0)
}
