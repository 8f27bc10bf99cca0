package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// A resource in the process's own memory: the write runs under the
// resource's lock, and the fence rises only if it succeeds. The new holder
// fences at takeover, before its first write.
func ExampleMemory() {
	ctx := context.Background()
	g := guard.NewMemory()
	orders := map[string]int{}
	setTotal := func(token uint64, total int) error {
		return g.Write(ctx, "orders/42", token, func() error {
			orders["orders/42"] = total
			return nil
		})
	}

	fmt.Println("token 1 writes 100:", setTotal(1, 100))
	fmt.Println("token 2 takes over:", g.Admit(ctx, "orders/42", 2))
	err := setTotal(1, 150) // the first holder, late
	fmt.Println("token 1 writes 150: stale:", errors.Is(err, guard.ErrStaleToken))
	fmt.Println("token 2 writes 200:", setTotal(2, 200))
	fmt.Println("total:", orders["orders/42"], "fence:", g.Fence("orders/42"))
	// Output:
	// token 1 writes 100: <nil>
	// token 2 takes over: <nil>
	// token 1 writes 150: stale: true
	// token 2 writes 200: <nil>
	// total: 200 fence: 2
}

// The token travels in the context: the holder puts it there (a held
// lease's Context carries it already), and the code that writes takes it
// out and passes it to the guard with its write.
func ExampleTokenFromContext() {
	g := guard.NewMemory()
	totals := map[string]int{}
	setTotal := func(ctx context.Context, total int) error {
		resource, token, ok := guard.TokenFromContext(ctx)
		if !ok {
			return guard.ErrNoToken
		}
		return g.Write(ctx, resource, token, func() error {
			totals[resource] = total
			return nil
		})
	}

	late := guard.ContextWithToken(context.Background(), "orders/42", 1)
	next := guard.ContextWithToken(context.Background(), "orders/42", 2)
	fmt.Println("token 2 writes 200:", setTotal(next, 200))
	fmt.Println("token 1 writes 150:", setTotal(late, 150))
	fmt.Println("no token:", setTotal(context.Background(), 0))
	fmt.Println("total:", totals["orders/42"])
	// Output:
	// token 2 writes 200: <nil>
	// token 1 writes 150: stale token: token 1 is below 2, the fence of resource "orders/42"
	// no token: no fencing token in the context
	// total: 200
}

// A guard that takes tokens from the network checks them against the lock
// store: a forged token above every one minted is refused and leaves the
// fence alone, and the real holder's writes go on.
func ExampleNewMintCheck() {
	b := memorybackend.New()
	defer b.Close()
	coord := fencing.New(b)
	ctx := context.Background()
	lease, err := coord.Grant(ctx, "orders/42", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	g := guard.NewMemory(guard.WithMintCheck(guard.NewMintCheck(coord)))

	err = g.Admit(ctx, "orders/42", 9223372036854775807) // a forged Fencing-Token
	fmt.Println(errors.Is(err, guard.ErrNotMinted), g.Fence("orders/42"))
	err = g.Admit(ctx, "orders/42", lease.Token)
	fmt.Println(err, g.Fence("orders/42"))
	// Output:
	// true 0
	// <nil> 1
}
