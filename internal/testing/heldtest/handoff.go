package heldtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// LockHandoffs is the body of a backend's handoff benchmark: n goroutines,
// goroutine i on cs[i%len(cs)], Lock key (with opts) and Release it at once
// until b.N locks have been taken, so that each release hands the key to a
// waiter. The timer runs from the first Lock to the last Release; any error
// fails b.
func LockHandoffs(b *testing.B, cs []*fencing.Coordinator, key string, n int, opts ...fencing.LockOption) {
	b.Helper()
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	errs := make(chan error, n)
	b.ResetTimer()
	for i := range n {
		c := cs[i%len(cs)]
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				h, err := c.Lock(ctx, key, 10*time.Second, opts...)
				if err != nil {
					errs <- err
					return
				}
				if err := h.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
