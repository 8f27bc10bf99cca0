package redisbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// TestGrantReleaseAllocs bounds the allocations of a Grant and Release
// through the Coordinator, on the client bench compares with redislock
// (ContextTimeoutEnabled). They were 53 before the script command was
// built whole (see script.argv); most of the 37 now are go-redis's and
// the request timeout's context. The bound leaves room for go-redis to
// vary.
func TestGrantReleaseAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv := redistest.Start(t, persistent)
	client := srv.Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	c := fencing.New(newBackend(t, client))
	ctx := context.Background()
	run := func() {
		l, err := c.Grant(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, "k", l.ID); err != nil {
			t.Fatal(err)
		}
	}
	run() // loads the scripts and dials
	a := testing.AllocsPerRun(200, run)
	t.Logf("%v allocations per Grant and Release", a)
	if a > 41 {
		t.Errorf("Grant and Release allocate %v times, want at most 41", a)
	}
}
