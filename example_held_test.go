package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

func ExampleCoordinator_Hold() {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)

	h, err := c.Hold(ctx, "reports/daily", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The lease is renewed in the background; work under h.Context(),
	// which ends the moment the lease is lost.
	fmt.Println("holding token", h.Token(), "err:", h.Err())

	_, err = c.Grant(ctx, "reports/daily", 30*time.Second)
	fmt.Println("others are held off:", errors.Is(err, fencing.ErrLeaseHeld))

	fmt.Println("release:", h.Release(ctx))
	fmt.Println("context ended:", h.Context().Err() != nil)
	// Output:
	// holding token 1 err: <nil>
	// others are held off: true
	// release: <nil>
	// context ended: true
}

// A lease lost under its holder ends the holder's context, with the reason.
func ExampleHeld_Context() {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)

	h, _ := c.Hold(ctx, "reports/daily", 30*time.Second, fencing.WithRenewInterval(10*time.Millisecond))
	defer h.Release(ctx)
	c.ForceRelease(ctx, "reports/daily") // an operator breaks the lock

	<-h.Context().Done() // the next renewal is rejected
	fmt.Println(errors.Is(context.Cause(h.Context()), fencing.ErrLeaseLost))
	fmt.Println(h.Err())
	// Output:
	// true
	// lease lost: renew "reports/daily": lease not found
}

func ExampleCoordinator_Lock() {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)

	first, _ := c.Hold(ctx, "queue/leader", 30*time.Second)
	next := make(chan *fencing.Held)
	go func() {
		h, err := c.Lock(ctx, "queue/leader", 30*time.Second) // waits, without polling
		if err != nil {
			fmt.Println(err)
		}
		next <- h
	}()

	// The release wakes the waiter if it is waiting already; if it is not
	// yet, its first attempt finds the key free. Either way it comes next.
	first.Release(ctx)
	h := <-next
	defer h.Release(ctx)
	fmt.Println("first token", first.Token(), "then", h.Token())
	// Output: first token 1 then 2
}

// A grant whose every response was lost leaves its lease ID in the error,
// so the caller can settle it instead of being locked out by its own lease.
func ExampleOutcomeError() {
	ctx := context.Background()
	mem := memorybackend.New()
	c := fencing.New(mem)

	// The grant took the key in the store, and its answer was lost on the
	// way back: the caller holds only the error, which names the lease.
	mem.Grant(ctx, backend.Request{Key: "k", LeaseID: "id-from-the-error", Timeout: time.Minute})
	var err error = &fencing.OutcomeError{Op: "grant", Key: "k", LeaseID: "id-from-the-error", Err: fencing.ErrOutcomeUnknown}
	fmt.Println(err)

	var oe *fencing.OutcomeError
	if errors.As(err, &oe) {
		// The grant may have taken the key: release it, or Renew to adopt it.
		if err := c.Release(ctx, oe.Key, oe.LeaseID); err != nil && !errors.Is(err, fencing.ErrLeaseNotFound) {
			fmt.Println("not settled:", err)
		}
	}
	st, _ := c.Inspect(ctx, "k")
	fmt.Println("held after settling:", st.Live, "highest token:", st.MaxToken)
	// Output:
	// grant "k": outcome unknown
	// held after settling: false highest token: 1
}

func ExampleCoordinator_Inspect() {
	ctx := context.Background()
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := fencing.New(memorybackend.New(memorybackend.WithClock(clock)))

	lease, _ := c.Grant(ctx, "jobs/nightly", 10*time.Second)
	clock.Advance(4 * time.Second)
	st, _ := c.Inspect(ctx, "jobs/nightly")
	fmt.Println("live:", st.Live, "token:", st.Token, "left:", st.Remaining)

	c.Release(ctx, "jobs/nightly", lease.ID)
	st, _ = c.Inspect(ctx, "jobs/nightly")
	fmt.Println("live:", st.Live, "highest token:", st.MaxToken)
	// Output:
	// live: true token: 1 left: 7s
	// live: false highest token: 1
}
