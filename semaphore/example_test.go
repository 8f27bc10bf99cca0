package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/semaphore"
)

// At most two workers at once: a third finds every permit taken until one
// is released, and then gets that slot with the slot's next token.
func Example() {
	b := memorybackend.New()
	defer b.Close()
	c := fencing.New(b)
	ctx := context.Background()
	s, err := semaphore.New(c, "workers/export", 2)
	if err != nil {
		panic(err)
	}

	first, _ := s.TryAcquire(ctx, 10*time.Second, fencing.WithOwner("worker-1"))
	second, _ := s.TryAcquire(ctx, 10*time.Second, fencing.WithOwner("worker-2"))
	defer second.Release(ctx)
	_, err = s.TryAcquire(ctx, 10*time.Second)
	fmt.Println("third worker refused:", errors.Is(err, fencing.ErrLeaseHeld))

	slot := first.Lease().Key
	first.Release(ctx)
	third, _ := s.Acquire(ctx, 10*time.Second, fencing.WithOwner("worker-3"))
	defer third.Release(ctx)
	fmt.Println("same slot:", third.Lease().Key == slot, "token:", third.Token())

	holders, _ := s.Holders(ctx)
	for _, p := range holders {
		if p.Owner == "worker-3" && p.Key == slot {
			fmt.Printf("worker-3 holds the freed slot with token %d\n", p.Token)
		}
	}
	fmt.Println("permits held:", len(holders))
	// Output:
	// third worker refused: true
	// same slot: true token: 2
	// worker-3 holds the freed slot with token 2
	// permits held: 2
}
