package redisbackend_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// TestRestartDuringReclamation kills redis-server (appendfsync always)
// while a pass reclaims 20,000 idle records and restarts it from its
// append-only file: every key's next token is still above its last one,
// the deleted keys' through the floor, raised in the scripts that deleted
// them (a script's effects reach the file as one MULTI/EXEC, which a
// restart replays whole or not at all).
func TestRestartDuringReclamation(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	ctx := context.Background()
	const n = 20_000
	b := newBackend(t, client, redisbackend.WithPrefix("rr:"), redisbackend.WithRetention(time.Second))
	// Records as released leases leave them, idle for an hour, with
	// tokens from 1 to 97: written by hand, pipelined, to be quick.
	old := make([]int, n)
	idle := "r" + strconv.FormatInt(time.Now().Add(-time.Hour).UnixMicro(), 10)
	pipe := client.Pipeline()
	for i := range old {
		old[i] = 1 + i%97
		pipe.HSet(ctx, b.RedisKey(key(i)), "token", old[i], "id", "old-"+strconv.Itoa(i), "exp", idle)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// A grant on another key starts a pass; kill the server once the pass
	// has deleted some records.
	mustGrant(t, b, "driver", "d")
	watch := srv.Client()
	defer watch.Close()
	for start := time.Now(); ; {
		size, err := watch.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if size < n+1 {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("no record reclaimed in a minute: DBSIZE %d", size)
		}
	}
	srv.Kill()
	srv.Restart()
	size, err := watch.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the restart DBSIZE is %d of the %d records, the driver and the floor", size, n)

	after := newBackend(t, srv.Client(), redisbackend.WithPrefix("rr:"), redisbackend.WithRetention(0))
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				l, err := after.Grant(ctx, req(key(i), "new"))
				if err != nil {
					t.Errorf("Grant(%q): %v", key(i), err)
					return
				}
				if l.Token <= uint64(old[i]) {
					t.Errorf("Grant(%q) after a restart during reclamation: token %d, not above %d: a token reissued", key(i), l.Token, old[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

func key(i int) string { return fmt.Sprintf("churn/%05d", i) }

// TestRetentionDeletesEveryRedisKey: once a key that had a line of waiters
// and a lock delay has been idle for the retention, no Redis key of it is
// left (the record by a pass, the line's keys by their expiry); until
// then, its lock delay keeps its record.
func TestRetentionDeletesEveryRedisKey(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	ctx := context.Background()
	const d = time.Second
	b := newBackend(t, client, redisbackend.WithPrefix("every:"), redisbackend.WithRetention(d))
	mustEnqueue(t, b, "k", "w", 500*time.Millisecond)
	r := req("k", "a")
	r.Timeout, r.LockDelay = 400*time.Millisecond, 2*d
	l, err := b.Grant(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	// Expired, then closed by its lock delay for 2d: passes driven by
	// another key must keep its record until the delay's end plus d.
	closedUntil := time.Now().Add(l.TTL + l.Margin + 2*d)
	for i := 0; time.Until(closedUntil) > 200*time.Millisecond; i++ {
		id := fmt.Sprintf("drive-%d", i)
		mustGrant(t, b, "driver", id)
		mustRelease(t, b, "driver", id)
		if n, err := client.Exists(ctx, b.RedisKey("k")).Result(); err != nil || n != 1 {
			t.Fatalf("%v before the lock delay's end, the record exists: %d, %v; want it kept", time.Until(closedUntil), n, err)
		}
		time.Sleep(d / 8)
	}
	pattern := strings.TrimSuffix(b.RedisKey("k"), ":token") + "*"
	start := time.Now()
	for i := 0; ; i++ {
		id := fmt.Sprintf("after-%d", i)
		mustGrant(t, b, "driver", id)
		mustRelease(t, b, "driver", id)
		left, err := client.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			t.Logf("every key of it gone %v after its delay ended", time.Since(closedUntil).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 10*d+30*time.Second {
			t.Fatalf("%v after the lock delay's end, keys of it are left: %v", time.Since(closedUntil), left)
		}
		time.Sleep(d / 8)
	}
	st, err := b.Inspect(ctx, "k")
	if err != nil || st != (backend.KeyState{}) {
		t.Fatalf("Inspect of the reclaimed key: %+v, %v; want the zero KeyState", st, err)
	}
	if l2 := mustGrant(t, b, "k", "b"); l2.Token <= l.Token {
		t.Fatalf("token after the reclaim %d, not above %d", l2.Token, l.Token)
	}
}
