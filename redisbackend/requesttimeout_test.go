package redisbackend_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// TestBackgroundCallsReturnWhenRedisStops: with the server frozen
// (SIGSTOP: it keeps its connections and answers nothing), every call
// with context.Background() returns within the request
// timeout's bound (Lock, which waits through it, when its wait ends), on a client with go-redis's defaults (which bound a
// read by its 3s ReadTimeout only, not by the context), and say that
// Redis did not answer.
func TestBackgroundCallsReturnWhenRedisStops(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // default timeouts
	defer client.Close()
	const reqTimeout = 200 * time.Millisecond
	// Its attempts (resends stop once reqTimeout has passed, so at most
	// two) and Hold's release of the lease its grant may have taken, each
	// bounded, and a loaded machine's slack; go-redis alone would take 3s
	// or more per attempt.
	const callBound = 5*reqTimeout + 2*time.Second
	c := fencing.New(newBackend(t, client), fencing.WithRequestTimeout(reqTimeout))
	ctx := context.Background()
	if _, err := c.Grant(ctx, "warm", time.Minute); err != nil {
		t.Fatal(err) // connections are up before the fault
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	calls := []struct {
		name string
		f    func() error
	}{
		{"Grant", func() error { _, err := c.Grant(ctx, "k", time.Minute); return err }},
		{"Hold", func() error { _, err := c.Hold(ctx, "k", time.Minute); return err }},
		// Lock waits through a server that does not answer, until its
		// wait ends: with context.Background(), WithWaitTimeout.
		{"Lock", func() error {
			_, err := c.Lock(ctx, "k", time.Minute, fencing.WithWaitTimeout(2*reqTimeout))
			return err
		}},
		{"Token", func() error { _, _, err := c.Token(ctx, "k"); return err }},
		{"Inspect", func() error { _, err := c.Inspect(ctx, "k"); return err }},
		{"ForceRelease", func() error { _, err := c.ForceRelease(ctx, "k"); return err }},
		{"List", func() error { _, _, err := c.List(ctx, "", "", 0); return err }},
		{"Release", func() error { return c.Release(ctx, "k", "some-lease") }},
	}
	for _, call := range calls {
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- call.f() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s with Redis stopped still blocked after 30s", call.name)
		}
		took := time.Since(start)
		t.Logf("%s with Redis stopped returned after %v: %v", call.name, took.Round(time.Millisecond), err)
		if took > callBound {
			t.Errorf("%s took %v with Redis stopped, want within %v", call.name, took, callBound)
		}
		if !errors.Is(err, fencing.ErrNoAnswer) {
			t.Errorf("%s with Redis stopped: %v, want ErrNoAnswer", call.name, err)
		}
	}
}

// callerStacks is a go-redis hook that records, for each EVALSHA the
// client sends, whether the goroutine sending it runs the function named
// caller (that is, whether the backend sent it on its caller's goroutine).
type callerStacks struct {
	caller   string
	mu       sync.Mutex
	onCaller []bool
}

func (h *callerStacks) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *callerStacks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *callerStacks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			buf := make([]byte, 64<<10)
			stack := string(buf[:runtime.Stack(buf, false)])
			h.mu.Lock()
			h.onCaller = append(h.onCaller, strings.Contains(stack, h.caller))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *callerStacks) take() []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.onCaller
	h.onCaller = nil
	return v
}

// TestDefaultClientRequestOnCallersGoroutine: on a client without
// ContextTimeoutEnabled, a request whose deadline is further away than the
// client's ReadTimeout (the Coordinator's default request timeout against
// go-redis's default timeouts) goes out on its caller's goroutine, since
// the client's own timeout ends it first; one whose deadline is nearer
// (here a request timeout of 1s) still goes out on a goroutine of its
// own, so that it returns at its deadline
// (TestBackgroundCallsReturnWhenRedisStops).
func TestDefaultClientRequestOnCallersGoroutine(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // default timeouts
	defer client.Close()
	if rt := client.Options().ReadTimeout; rt <= time.Second || rt >= fencing.DefaultRequestTimeout {
		t.Fatalf("go-redis's default ReadTimeout is %v: this test needs it between 1s and %v", rt, fencing.DefaultRequestTimeout)
	}
	hook := &callerStacks{caller: "TestDefaultClientRequestOnCallersGoroutine"}
	client.AddHook(hook)
	b := newBackend(t, client)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		opts     []fencing.Option
		onCaller bool
	}{
		{"default request timeout", nil, true},
		{"request timeout below ReadTimeout", []fencing.Option{fencing.WithRequestTimeout(time.Second)}, false},
	} {
		c := fencing.New(b, tc.opts...)
		hook.take()
		l, err := c.Grant(ctx, "k", time.Minute)
		if err != nil {
			t.Fatalf("%s: Grant: %v", tc.name, err)
		}
		if err := c.Release(ctx, "k", l.ID); err != nil {
			t.Fatalf("%s: Release: %v", tc.name, err)
		}
		got := hook.take()
		if len(got) != 2 {
			t.Fatalf("%s: %d EVALSHA sent, want 2 (grant, release)", tc.name, len(got))
		}
		for i, on := range got {
			if on != tc.onCaller {
				t.Errorf("%s: request %d on the caller's goroutine: %v, want %v", tc.name, i, on, tc.onCaller)
			}
		}
	}
}
