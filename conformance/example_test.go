package conformance_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/memorybackend"
)

// Record what clients do through a backend and check the history against
// the lease model. In a fault test the clients run concurrently while
// servers fail; here one client runs on a fake clock.
func ExampleCheckHistory() {
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	rec := conformance.NewRecorder(clock.Now)
	c := fencing.New(rec.Wrap(mem))
	ctx := context.Background()

	lease, _ := c.Grant(ctx, "k", 10*time.Second)
	clock.Advance(11 * time.Second) // timeout + default margin: expired
	c.CheckToken(ctx, "k", lease.Token)
	c.Grant(ctx, "k", 10*time.Second)

	err := conformance.CheckHistory(rec.History(), conformance.Traits{Now: clock.Now, DenseTokens: true})
	fmt.Println(len(rec.History()), "calls, linearizable:", err == nil)
	// Output: 3 calls, linearizable: true
}
