package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// The README's Quickstart: wait for the key, hold it, and write through a
// guard that refuses a token lower than one it has admitted. The last write
// is what a stalled holder's late write looks like to the resource.
func Example_quickstart() {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	orders := guard.NewMemory() // the resource's side: or sqlguard, etcdguard, redisguard
	total := map[int]int{}

	write := func(h *fencing.Held, value int) error {
		return orders.Write(h.Context(), "orders/42", h.Token(), func() error {
			total[42] = value // applied only if the token is still the newest
			return nil
		})
	}

	a, err := c.Lock(ctx, "orders/42", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("A writes:", write(a, 100))
	a.Release(ctx)

	b, err := c.Lock(ctx, "orders/42", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Release(ctx)
	fmt.Println("B writes:", write(b, 200))

	// A kept its token and writes late, as a paused holder would.
	err = orders.Write(ctx, "orders/42", a.Token(), func() error { total[42] = 300; return nil })
	fmt.Println("A late:", errors.Is(err, guard.ErrStaleToken))
	fmt.Println("total:", total[42])
	// Output:
	// A writes: <nil>
	// B writes: <nil>
	// A late: true
	// total: 200
}
