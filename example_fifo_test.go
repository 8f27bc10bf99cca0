package fencing_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencing-go/fencing"
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
	var wg sync.WaitGroup
	for _, name := range []string{"blue", "green", "red"} {
		wg.Go(func() {
			h, err := c.Lock(ctx, "jobs/deploy", time.Minute, fencing.WithFIFO())
			if err != nil {
				panic(err)
			}
			fmt.Println(name, "holds token", h.Token())
			h.Release(ctx)
		})
		time.Sleep(50 * time.Millisecond) // in line before the next begins to wait
	}
	first.Release(ctx)
	wg.Wait()
	// Output:
	// blue holds token 2
	// green holds token 3
	// red holds token 4
}
