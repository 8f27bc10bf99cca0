package fencing_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// A held lease's context carries its key and token, so a call made under it
// (through guard/httpguard's Transport or guard/grpcguard's interceptors)
// carries them to the service that writes, where guard.TokenFromContext
// reads them.
func ExampleHeld_Context_token() {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)

	held, err := c.Hold(context.Background(), "orders/42", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer held.Release(context.Background())

	resource, token, ok := guard.TokenFromContext(held.Context())
	fmt.Println(resource, token, ok)
	// Output:
	// orders/42 1 true
}
