package fencing_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// A lease's owner is a public label stored with it: Inspect (and List, and
// the command-line tool) show who holds a key, never the lease ID.
func ExampleWithOwner() {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem, fencing.WithDefaultOwner("batch-host/pid 4711"))

	h, err := c.Hold(ctx, "reports/daily", 30*time.Second, fencing.WithOwner("report-worker-2"))
	if err != nil {
		panic(err)
	}
	st, _ := c.Inspect(ctx, "reports/daily")
	fmt.Printf("held by %q with token %d\n", st.Owner, st.Token)
	h.Release(ctx)

	lease, _ := c.Grant(ctx, "reports/weekly", 30*time.Second) // the Coordinator's default owner
	st, _ = c.Inspect(ctx, "reports/weekly")
	fmt.Printf("held by %q with token %d\n", st.Owner, st.Token)
	c.Release(ctx, "reports/weekly", lease.ID)
	// Output:
	// held by "report-worker-2" with token 1
	// held by "batch-host/pid 4711" with token 1
}
