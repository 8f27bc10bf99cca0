package fencing_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// A held lease's context carries its key and token, so a call made under it
// (through guard/httpguard's Transport or guard/grpcguard's interceptors)
// carries them to the service that writes.
func ExampleTokenFromContext() {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)

	held, err := c.Hold(context.Background(), "orders/42", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer held.Release(context.Background())

	resource, token, ok := fencing.TokenFromContext(held.Context())
	fmt.Println(resource, token, ok)

	// A bare Lease's token goes in by hand.
	ctx := fencing.ContextWithToken(context.Background(), "reports/daily", 7)
	resource, token, ok = fencing.TokenFromContext(ctx)
	fmt.Println(resource, token, ok)
	// Output:
	// orders/42 1 true
	// reports/daily 7 true
}
