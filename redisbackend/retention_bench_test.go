package redisbackend_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// BenchmarkRetention is a grant and a release, one goroutine, with the
// retention off, at its default (24 hours: no pass due) and at 1s (a pass
// every 125ms, deleting the keys of a second before while the loop runs),
// on one key (Reused) and on a new key each time (New, which reads the
// floor). Each variant runs in turn in one process, so a loop of runs
// interleaves them (docs/redis.md has the commands).
func BenchmarkRetention(b *testing.B) {
	srv := redistest.Start(b, redistest.Config{AppendOnly: true, AppendFsync: "everysec"})
	client := srv.Client()
	ctx := context.Background()
	for _, v := range []struct {
		name string
		d    time.Duration
	}{{"Off", 0}, {"Default", redisbackend.DefaultRetention}, {"1s", time.Second}} {
		for _, newKeys := range []bool{false, true} {
			name := v.name + "/Reused"
			if newKeys {
				name = v.name + "/New"
			}
			b.Run(name, func(b *testing.B) {
				rb, err := redisbackend.New(ctx, client, redisbackend.WithLogger(quietLogger()),
					redisbackend.WithPrefix("bench-"+name+":"), redisbackend.WithRetention(v.d))
				if err != nil {
					b.Fatal(err)
				}
				defer rb.Close()
				// The scripts are in the server's cache before the loop.
				if _, err := rb.Grant(ctx, req("warm", "w")); err != nil {
					b.Fatal(err)
				}
				if err := rb.Release(ctx, "warm", "w"); err != nil {
					b.Fatal(err)
				}
				i := 0
				for b.Loop() {
					k := "k"
					if newKeys {
						k = "k" + strconv.Itoa(i)
					}
					id := strconv.Itoa(i)
					if _, err := rb.Grant(ctx, req(k, id)); err != nil {
						b.Fatal(err)
					}
					if err := rb.Release(ctx, k, id); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}
