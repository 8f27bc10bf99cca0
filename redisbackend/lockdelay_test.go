package redisbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// The lock delay's Redis-specific side: where it is kept and what reads
// it. Its contract is the conformance suite's.

func wantDelayed(t *testing.T, err error, atMost time.Duration, what string) {
	t.Helper()
	var held *backend.HeldError
	if !errors.As(err, &held) || !held.Delayed || held.Remaining <= 0 || held.Remaining > atMost {
		t.Fatalf("%s: Grant = %v (%+v), want a delayed *HeldError with at most %v left", what, err, held, atMost)
	}
}

func delayedReq(key, id string, ttl, delay time.Duration) backend.Request {
	return backend.Request{Key: key, LeaseID: id, Timeout: ttl, LockDelay: delay}
}

// TestLockDelayAfterForceInExp: a forced release of a lease with a lock
// delay writes "f" and the delay's end into exp, where the grant script
// reads it without a field more, and Token's pipelined read on a
// *redis.Client still answers "not live" alone, without the script.
func TestLockDelayAfterForceInExp(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	const delay = 5 * time.Second
	if _, err := b.Grant(ctx, delayedReq("k", "a", time.Minute, delay)); err != nil {
		t.Fatal(err)
	}
	if ended, err := b.ForceRelease(ctx, "k"); err != nil || !ended {
		t.Fatalf("ForceRelease = %v, %v", ended, err)
	}
	exp, err := client.HGet(ctx, b.RedisKey("k"), "exp").Result()
	if err != nil || !strings.HasPrefix(exp, "f") {
		t.Fatalf("exp after a forced release with a delay = %q, %v; want \"f\" and the delay's end", exp, err)
	}
	_, err = b.Grant(ctx, delayedReq("k", "b", time.Minute, 0))
	wantDelayed(t, err, delay, "during the delay")
	before := evalshaCalls(t, client)
	if _, live, err := b.Token(ctx, "k"); err != nil || live {
		t.Fatalf("Token during the delay: live %v, %v", live, err)
	}
	if n := evalshaCalls(t, client) - before; n != 0 {
		t.Fatalf("Token during a forced release's delay ran %d scripts, want the pipelined read alone", n)
	}
	// The holder's own release of its ended lease changes nothing.
	if err := b.Release(ctx, "k", "a"); err != nil {
		t.Fatalf("Release by the old holder: %v", err)
	}
	_, err = b.Grant(ctx, delayedReq("k", "b", time.Minute, 0))
	wantDelayed(t, err, delay, "after the old holder's release")
}

// TestLockDelaySurvivesRestart: the delay is in the record, which has no
// TTL and is in the append-only file, so a kill -9 and restart of the
// server during a delay keep the key closed until the delay's end on the
// server's clock, after an expiry and after a forced release alike.
func TestLockDelaySurvivesRestart(t *testing.T) {
	srv := redistest.Start(t, persistent)
	b := newBackend(t, srv.Client())
	ctx := context.Background()
	const ttl, delay = 200 * time.Millisecond, 3 * time.Second
	if _, err := b.Grant(ctx, delayedReq("expired", "a", ttl, delay)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant(ctx, delayedReq("forced", "a", time.Minute, delay)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ForceRelease(ctx, "forced"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	srv.Kill()
	srv.Restart()
	for _, k := range []string{"expired", "forced"} {
		_, err := b.Grant(ctx, delayedReq(k, "b", time.Minute, 0))
		wantDelayed(t, err, delay, k+" after a restart")
		st, err := b.Inspect(ctx, k)
		if err != nil || st.Live || st.DelayRemaining <= 0 || st.DelayRemaining > delay || st.DelayedUntil.IsZero() {
			t.Fatalf("Inspect(%s) after a restart = %+v, %v; want a delay of at most %v", k, st, err, delay)
		}
	}
}

// TestLockDelayWithMinReplicas: a grant refused during a delay, sent with
// WAIT in one pipeline, is the same delayed *HeldError (nothing was
// written, so nothing is waited for), and the replica has the forced
// release's delay: it is in the record, replicated by the script's effects.
func TestLockDelayWithMinReplicas(t *testing.T) {
	rs := redistest.StartReplicated(t, persistent)
	ctx := context.Background()
	b := newBackend(t, rs.Primary.Client(), redisbackend.WithMinReplicas(1, 3*time.Second))
	const delay = 10 * time.Second
	if _, err := b.Grant(ctx, delayedReq("k", "a", time.Minute, delay)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	_, err := b.Grant(ctx, delayedReq("k", "b", time.Minute, 0))
	wantDelayed(t, err, delay, "on the primary")
	replica := rs.Replica.Client()
	onReplica := newBackend(t, replica, redisbackend.WithSafetyCheck(backend.CheckSkip))
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := onReplica.Inspect(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if st.DelayRemaining > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica's view of the key = %+v, want the forced release's delay", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
