package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// A lease renewed in the background, but held for 700ms in all: the last
// renewal asks only for the time left, the Context ends 700ms after the
// grant was sent, and the key is released for the next holder.
func ExampleWithMaxHold() {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)

	h, err := c.Hold(ctx, "jobs/compact", 500*time.Millisecond, fencing.WithMaxHold(700*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	<-h.Done() // work under h.Context() stops here
	err = h.Err()
	fmt.Println("lost:", errors.Is(err, fencing.ErrLeaseLost), "max hold:", errors.Is(err, fencing.ErrMaxHold))
	fmt.Println(err)

	fmt.Println("release:", h.Release(ctx)) // the loss; the lease was released at the cap
	_, err = c.Grant(ctx, "jobs/compact", time.Minute)
	fmt.Println("the next holder gets the key:", err == nil)
	// Output:
	// lost: true max hold: true
	// lease lost: maximum hold reached (700ms after the grant was sent)
	// release: lease lost: maximum hold reached (700ms after the grant was sent)
	// the next holder gets the key: true
}
