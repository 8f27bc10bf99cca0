package redisbackend_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// TestRetentionDBSize churns distinct keys (each granted and released once)
// on a server of its own and lets the retention pass with calls on one
// other key: DBSIZE, which counts every Redis key the backend keeps (records,
// lines, floors), must come back to what it was before the churn plus the
// floor. It logs DBSIZE and used_memory at each step, which is how
// docs/redis.md's figures are taken:
//
//	FENCING_REDIS_CHURN=1000000 FENCING_REDIS_RETENTION=2m CI=true go test -run TestRetentionDBSize -v -timeout 30m ./redisbackend
//
// (10,000 keys and a retention of 2s by default; FENCING_REDIS_RETENTION
// sets another, which should be longer than the churn takes.)
func TestRetentionDBSize(t *testing.T) {
	n := 10_000
	if s := os.Getenv("FENCING_REDIS_CHURN"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("FENCING_REDIS_CHURN: %v", err)
		}
	}
	d := 2 * time.Second
	if s := os.Getenv("FENCING_REDIS_RETENTION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("FENCING_REDIS_RETENTION: %v", err)
		}
	}
	srv := redistest.Start(t, redistest.Config{AppendOnly: true, AppendFsync: "everysec"})
	client := srv.Client(func(o *redis.Options) { o.PoolSize = 32 })
	ctx := context.Background()
	b := newBackend(t, client, redisbackend.WithPrefix("size:"), redisbackend.WithRetention(d))
	size := func(when string) int64 {
		t.Helper()
		keys, err := client.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		info, err := client.InfoMap(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: DBSIZE %d, used_memory %s", when, keys, info["Memory"]["used_memory"])
		return keys
	}
	baseline := size("before")

	start := time.Now()
	const workers = 16
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				k, id := "churn/"+strconv.Itoa(i), "l"+strconv.Itoa(i)
				if _, err := b.Grant(ctx, req(k, id)); err != nil {
					t.Errorf("Grant(%q): %v", k, err)
					return
				}
				if err := b.Release(ctx, k, id); err != nil {
					t.Errorf("Release(%q): %v", k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	took := time.Since(start)
	t.Logf("churned %d keys in %v", n, took.Round(time.Millisecond))
	if got := size("after the churn"); took < d && got < baseline+int64(n) {
		t.Fatalf("DBSIZE %d after churning %d keys from %d: the records are not there", got, n, baseline)
	}

	// Calls on another key drive the reclaiming: a Release of a key never
	// leased, which writes nothing.
	ended := time.Now()
	for {
		if err := b.Release(ctx, "driver", "none"); !errors.Is(err, backend.ErrLeaseNotFound) {
			t.Fatalf("Release of a key never leased: %v", err)
		}
		keys, err := client.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if keys <= baseline+1 {
			t.Logf("DBSIZE back to %d (the floor) %v after the churn ended", keys, time.Since(ended).Round(time.Millisecond))
			break
		}
		if time.Since(ended) > 3*d+time.Duration(n/1000)*time.Second+time.Minute {
			t.Fatalf("%v after the churn DBSIZE is %d; want %d (the floor)", time.Since(ended), keys, baseline+1)
		}
		time.Sleep(d / 8)
	}
	size("after the retention")
}
