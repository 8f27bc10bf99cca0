package memorybackend_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// A fake clock makes lease expiry instant and exact in tests of code that
// holds leases: the backend reads only this clock to decide expiry.
func ExampleFakeClock() {
	ctx := context.Background()
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	c := fencing.New(mem)

	lease, _ := c.Grant(ctx, "jobs/nightly", 10*time.Second) // + 1s default margin
	fmt.Println("expires at:", lease.ExpiresAt.Format(time.TimeOnly))

	clock.Advance(11*time.Second - time.Nanosecond)
	ok, _ := c.CheckToken(ctx, "jobs/nightly", lease.Token)
	fmt.Println("live 1ns before:", ok)

	clock.Advance(time.Nanosecond)
	ok, _ = c.CheckToken(ctx, "jobs/nightly", lease.Token)
	fmt.Println("live at expiry:", ok)

	_, err := c.Renew(ctx, "jobs/nightly", lease.ID, 10*time.Second)
	fmt.Println("renew:", errors.Is(err, fencing.ErrLeaseExpired))

	next, _ := c.Grant(ctx, "jobs/nightly", 10*time.Second)
	fmt.Println("next token:", next.Token)
	// Output:
	// expires at: 00:00:11
	// live 1ns before: true
	// live at expiry: false
	// renew: true
	// next token: 2
}

// WithMaxToken lets a test reach the end of the token space.
func ExampleWithMaxToken() {
	ctx := context.Background()
	mem := memorybackend.New(memorybackend.WithMaxToken(1))
	defer mem.Close()
	c := fencing.New(mem)

	lease, _ := c.Grant(ctx, "k", time.Minute)
	c.Release(ctx, "k", lease.ID)
	_, err := c.Grant(ctx, "k", time.Minute)
	fmt.Println(errors.Is(err, fencing.ErrTokenSpaceExhausted))
	// Output: true
}
