package fencing_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// A lease with a lock delay that ends without its holder's release (here an
// operator forces a wedged holder out) keeps its key closed for the delay,
// so a holder still running has time to stop what no token guards. A
// release by the holder frees the key at once.
func ExampleWithLockDelay() {
	ctx := context.Background()
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	c := fencing.New(mem)
	delay := fencing.WithLockDelay(15 * time.Second)

	h, _ := c.Hold(ctx, "mailer", 30*time.Second, delay)
	h.Release(ctx) // a clean end: no delay
	h, _ = c.Hold(ctx, "mailer", 30*time.Second, delay)
	fmt.Println("holding token", h.Token())

	c.ForceRelease(ctx, "mailer") // an unclean end: the delay starts now
	_, err := c.Grant(ctx, "mailer", 30*time.Second)
	fmt.Println(err)
	st, _ := c.Inspect(ctx, "mailer")
	fmt.Printf("delayed until %s (%v left)\n", st.DelayedUntil.Format(time.TimeOnly), st.DelayRemaining)

	clock.Advance(15 * time.Second)
	lease, _ := c.Grant(ctx, "mailer", 30*time.Second)
	fmt.Println("granted token", lease.Token)
	h.Release(ctx)
	// Output:
	// holding token 2
	// grant "mailer": key held by a live lease (in a lock delay for 15s more)
	// delayed until 12:00:15 (15s left)
	// granted token 3
}

// WithDefaultLockDelay gives every lease of a Coordinator a lock delay, Grant's
// too: a holder that crashes leaves its key closed for the delay after its
// lease expires.
func ExampleWithDefaultLockDelay() {
	ctx := context.Background()
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	c := fencing.New(mem, fencing.WithDefaultLockDelay(10*time.Second))

	crashed, _ := c.Grant(ctx, "reports", 5*time.Second, 0)
	clock.Advance(5 * time.Second) // its holder never renewed: the lease expires
	live, _ := c.CheckToken(ctx, "reports", crashed.Token)
	fmt.Println("token", crashed.Token, "live:", live)
	_, err := c.Grant(ctx, "reports", 5*time.Second, 0)
	fmt.Println(err)

	clock.Advance(10 * time.Second)
	lease, _ := c.Grant(ctx, "reports", 5*time.Second, 0)
	fmt.Println("granted token", lease.Token)
	// Output:
	// token 1 live: false
	// grant "reports": key held by a live lease (in a lock delay for 10s more)
	// granted token 2
}
