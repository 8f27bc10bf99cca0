package redisbackend_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// tokenPipeline is a go-redis hook that records the commands of every
// pipeline, and can make the TIME in one read later than it was, as a
// TIME answered after a slow HMGET (and a renewal between them) reads.
type tokenPipeline struct {
	mu      sync.Mutex
	orders  [][]string
	lateBy  time.Duration // added to every TIME reply
	pipeHit int
}

func (h *tokenPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *tokenPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *tokenPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, c := range cmds {
			names = append(names, c.Name())
		}
		err := next(ctx, cmds)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.orders = append(h.orders, names)
		for _, c := range cmds {
			if c.Name() != "time" || h.lateBy == 0 {
				continue
			}
			if tc, ok := c.(*redis.Cmd); ok {
				now := time.Now().Add(h.lateBy)
				tc.SetVal([]any{strconv.FormatInt(now.Unix(), 10), strconv.Itoa(now.Nanosecond() / 1000)})
				h.pipeHit++
			}
		}
		return err
	}
}

// The pipelined token check reads the record before the clock: a clock
// read first could judge a record read after it (see Backend.Token).
func TestPipelinedTokenReadsRecordThenClock(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	hook := &tokenPipeline{}
	client.AddHook(hook)
	b := newBackend(t, client)
	mustGrant(t, b, "k", "id")
	if _, live, err := b.Token(context.Background(), "k"); err != nil || !live {
		t.Fatalf("Token of a live lease: %v, %v", live, err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	for _, o := range hook.orders {
		if len(o) == 2 && o[0] == "hmget" && o[1] == "time" {
			return
		}
	}
	t.Fatalf("pipelines %v: no HMGET followed by TIME", hook.orders)
}

// A pipelined check that finds the lease looking ended (its TIME read late
// enough that the record's expiry has passed) does not answer "not live"
// on its own: the record may have been renewed between the two reads.
// The token script, which reads both at one instant, decides.
func TestPipelinedTokenAsksScriptWhenLeaseLooksEnded(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	hook := &tokenPipeline{lateBy: time.Hour}
	client.AddHook(hook)
	b := newBackend(t, client)
	mustGrant(t, b, "k", "id") // a minute's lease: live on the server's clock
	raw := srv.Client()
	before := evalshaCalls(t, raw)
	if tok, live, err := b.Token(context.Background(), "k"); err != nil || !live || tok != 1 {
		t.Fatalf("Token of a live lease whose pipelined TIME read an hour late: %d, %v, %v; want 1, live", tok, live, err)
	}
	hook.mu.Lock()
	hit := hook.pipeHit
	hook.mu.Unlock()
	if hit == 0 {
		t.Fatal("the test's late TIME was never read: no pipelined token check ran")
	}
	if n := evalshaCalls(t, raw) - before; n != 1 {
		t.Fatalf("%d scripts ran for the check, want the token script once", n)
	}
}
