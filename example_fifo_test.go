package fencing_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// With WithFIFO, waiters get the key in the order their waits began, and
// each release wakes only the next one.
func ExampleWithFIFO() {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	ctx := context.Background()

	first, err := c.Lock(ctx, "jobs/deploy", time.Minute, fencing.WithFIFO())
	if err != nil {
		panic(err)
	}
	// Wait until the line holds n waiters, read from the store.
	awaitLine := func(n int) {
		for inLine(ctx, mem, "jobs/deploy") != n {
			time.Sleep(time.Millisecond)
		}
	}
	awaitLine(0) // first has left the line it passed through
	var wg sync.WaitGroup
	for i, name := range []string{"blue", "green", "red"} {
		wg.Go(func() {
			h, err := c.Lock(ctx, "jobs/deploy", time.Minute, fencing.WithFIFO())
			if err != nil {
				panic(err)
			}
			fmt.Println(name, "holds token", h.Token())
			h.Release(ctx)
		})
		awaitLine(i + 1) // in line before the next begins to wait
	}
	first.Release(ctx)
	wg.Wait()
	// Output:
	// blue holds token 2
	// green holds token 3
	// red holds token 4
}

// inLine returns how many waiters are in key's line, read from the store:
// the number ahead of a probe that joins the line's end and leaves at once.
func inLine(ctx context.Context, q backend.Queuer, key string) int {
	p, err := q.Enqueue(ctx, key, "probe", time.Minute)
	if err != nil {
		panic(err)
	}
	if err := q.Dequeue(ctx, key, "probe"); err != nil {
		panic(err)
	}
	return p.Ahead
}
