package heldtest

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// LockResult is how a Lock in a goroutine of the test ended, and when.
type LockResult struct {
	Held *fencing.Held
	Err  error
	At   time.Time
}

// LockAsync runs c.Lock in a goroutine and returns the channel its result
// comes on.
func LockAsync(ctx context.Context, c *fencing.Coordinator, key string, ttl time.Duration, opts ...fencing.LockOption) <-chan LockResult {
	ch := make(chan LockResult, 1)
	go func() {
		h, err := c.Lock(ctx, key, ttl, opts...)
		ch <- LockResult{h, err, time.Now()}
	}()
	return ch
}

// Result waits for ch's result, failing t (what names the waiter) if Lock
// has not returned within a minute.
func Result(t testing.TB, ch <-chan LockResult, what string) LockResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("%s: Lock did not return within a minute", what)
		return LockResult{}
	}
}
