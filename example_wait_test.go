package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// WithWaitTimeout bounds only Lock's wait: the second Lock gives up after
// 50ms, while the first one's lease goes on under its context.
func ExampleWithWaitTimeout() {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	ctx := context.Background()

	first, err := c.Lock(ctx, "jobs/nightly", time.Minute, fencing.WithWaitTimeout(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer first.Release(ctx)

	_, err = c.Lock(ctx, "jobs/nightly", time.Minute, fencing.WithWaitTimeout(50*time.Millisecond))
	fmt.Println(errors.Is(err, fencing.ErrLeaseHeld))
	fmt.Println(strings.SplitN(err.Error(), " (", 2)[0]) // the holder's time left varies

	time.Sleep(100 * time.Millisecond) // past the first Lock's wait timeout
	fmt.Println(first.Err() == nil)
	// Output:
	// true
	// lock "jobs/nightly": gave up after waiting 50ms: key held by a live lease
	// true
}
