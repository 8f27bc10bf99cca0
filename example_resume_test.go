package fencing_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// A holder saves its lease, and after a restart takes it back with its
// token instead of waiting it out. (The memory store lives in the process,
// so both Coordinators here share one; a real store is reached by a new
// client after the restart.)
func ExampleCoordinator_Resume() {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()

	before := fencing.New(mem)
	l, err := before.Grant(ctx, "reports/daily", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	saved, _ := json.Marshal(fencing.Lease{Key: l.Key, ID: l.ID, Token: l.Token, TTL: l.TTL, Margin: l.Margin})
	// The process stops here, and starts again.

	after := fencing.New(mem)
	var back fencing.Lease
	if err := json.Unmarshal(saved, &back); err != nil {
		fmt.Println(err)
		return
	}
	h, err := after.Resume(ctx, back)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("resumed with token", h.Token(), "same:", h.Token() == l.Token)
	fmt.Println("release:", h.Release(ctx))

	_, err = after.Resume(ctx, back)
	fmt.Println("once released:", errors.Is(err, fencing.ErrLeaseNotFound))
	// Output:
	// resumed with token 1 same: true
	// release: <nil>
	// once released: true
}
