package redisbackend_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// startSentinel starts a primary with a replica (both with appendfsync
// always) and a Sentinel watching them, and returns them and a failover
// client on them, closed when t ends.
func startSentinel(t *testing.T) (*redistest.Replicated, *redis.Client) {
	t.Helper()
	rs := redistest.StartReplicated(t, persistent)
	sentinel := redistest.StartSentinel(t, "fencing-primary", rs.Primary)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "fencing-primary",
		SentinelAddrs: []string{sentinel.Addr()},
		MaxRetries:    -1,
		DialTimeout:   500 * time.Millisecond,
		ReadTimeout:   3 * time.Second,
	})
	t.Cleanup(func() { client.Close() })
	return rs, client
}

// TestSentinelFailover runs the backend over go-redis's Sentinel failover
// client. Grants acknowledged by the replica (WithMinReplicas) survive a
// kill -9 of the primary: after Sentinel promotes the replica, the next
// token is larger than every token granted before.
func TestSentinelFailover(t *testing.T) {
	rs, client := startSentinel(t)
	b := newBackend(t, client, redisbackend.WithMinReplicas(1, 2*time.Second))
	ctx := context.Background()

	var last uint64
	for i := range 3 {
		id := "before-" + strconv.Itoa(i)
		last = mustGrant(t, b, "k", id).Token
		mustRelease(t, b, "k", id)
	}
	if last != 3 {
		t.Fatalf("token %d before the failover, want 3", last)
	}

	// A waiter subscribed on the old primary.
	sub := mustNotify(t, b, "watched")

	rs.Primary.Kill()

	// Sentinel notices after a second, promotes the replica, and the
	// failover client follows it. Until then grants fail: a refused dial
	// is known not to have been sent, anything else may have been; once the
	// new primary runs without a replica, they fail with ErrReplication.
	// Either way the key's record shows whether a token was used.
	deadline := time.Now().Add(60 * time.Second)
	for {
		lease, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "after", Timeout: time.Minute})
		switch {
		case err == nil, errors.Is(err, redisbackend.ErrReplication):
			// The grant ran on the promoted replica (which now has no
			// replica of its own to wait for).
			tok, live, terr := b.Token(ctx, "k")
			if terr != nil || !live {
				t.Fatalf("Token after failover: %d, %v, %v", tok, live, terr)
			}
			if tok <= last || (err == nil && lease.Token != tok) {
				t.Fatalf("token %d after the failover, want more than %d", tok, last)
			}
			// The waiter was woken when its connection broke, and is
			// subscribed again on the new primary: a release there wakes it.
			wantWake(t, sub, "after the primary was killed")
			waitNumSub(t, rs.Replica.Client(), false, channelOf(b, "watched"), 1)
			drain(sub)
			if _, err := b.Grant(ctx, backend.Request{Key: "watched", LeaseID: "w", Timeout: time.Minute}); err != nil && !errors.Is(err, redisbackend.ErrReplication) {
				t.Fatalf("Grant on the new primary: %v", err)
			}
			mustRelease(t, b, "watched", "w")
			wantWake(t, sub, "after a release on the new primary")
			return
		default:
			wantClassified(t, "Grant during failover", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover within a minute; last error: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
