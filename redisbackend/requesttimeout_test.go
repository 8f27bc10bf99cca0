package redisbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/redistest"
)

// TestBackgroundCallsReturnWhenRedisStops: with the server frozen
// (SIGSTOP: it keeps its connections and answers nothing), every call
// with context.Background() returns within the request
// timeout's bound, on a client with go-redis's defaults (which bound a
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
		{"Lock", func() error { _, err := c.Lock(ctx, "k", time.Minute); return err }},
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
