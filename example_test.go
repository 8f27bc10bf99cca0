package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

func ExampleNew() {
	mem := memorybackend.New() // or an etcd or Redis backend
	defer mem.Close()
	c := fencing.New(mem)

	lease, err := c.Grant(context.Background(), "reports/daily", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token:", lease.Token)
	// Output: token: 1
}

func ExampleCoordinator_Grant() {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)

	lease, err := c.Grant(ctx, "reports/daily", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("granted token %d for %v (+%v margin)\n", lease.Token, lease.TTL, lease.Margin)

	// While the lease is live, nobody else gets the key.
	_, err = c.Grant(ctx, "reports/daily", 30*time.Second)
	fmt.Println("second grant held:", errors.Is(err, fencing.ErrLeaseHeld))

	ok, _ := c.CheckToken(ctx, "reports/daily", lease.Token)
	fmt.Println("token checks:", ok)

	if err := c.Release(ctx, "reports/daily", lease.ID); err != nil {
		fmt.Println(err)
		return
	}
	ok, _ = c.CheckToken(ctx, "reports/daily", lease.Token)
	fmt.Println("token checks after release:", ok)

	next, _ := c.Grant(ctx, "reports/daily", 30*time.Second)
	fmt.Println("next token:", next.Token)
	// Output:
	// granted token 1 for 30s (+1s margin)
	// second grant held: true
	// token checks: true
	// token checks after release: false
	// next token: 2
}

func ExampleCoordinator_Do() {
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)

	err := c.Do(context.Background(), "reports/daily", time.Minute, func(ctx context.Context, lease fencing.Lease) error {
		// ctx ends at lease.Deadline. Send lease.Token with every write.
		fmt.Println("working with token", lease.Token)
		return nil
	})
	fmt.Println("done:", err)

	// Do released the lease: the key is free.
	_, live, _ := c.Token(context.Background(), "reports/daily")
	fmt.Println("live after Do:", live)
	// Output:
	// working with token 1
	// done: <nil>
	// live after Do: false
}

func ExampleCoordinator_Renew() {
	ctx := context.Background()
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	c := fencing.New(mem)

	lease, _ := c.Grant(ctx, "jobs/nightly", 10*time.Second)
	fmt.Println("expires:", lease.ExpiresAt.Format(time.TimeOnly))

	// Renew well before the Deadline; the token stays the same.
	clock.Advance(5 * time.Second)
	lease, err := c.Renew(ctx, "jobs/nightly", lease.ID, 10*time.Second)
	if err != nil {
		fmt.Println("stop working:", err)
		return
	}
	fmt.Println("renewed, token", lease.Token, "expires:", lease.ExpiresAt.Format(time.TimeOnly))

	// A renew that comes too late fails, and the holder must stop.
	clock.Advance(time.Minute)
	_, err = c.Renew(ctx, "jobs/nightly", lease.ID, 10*time.Second)
	fmt.Println("late renew expired:", errors.Is(err, fencing.ErrLeaseExpired))
	// Output:
	// expires: 00:00:11
	// renewed, token 1 expires: 00:00:16
	// late renew expired: true
}

// errStale is what the protected resource says to a writer whose token is
// older than one it has already seen.
var errStale = errors.New("stale token")

// fencedStore is the resource side of fencing: it remembers the highest
// token it has accepted and refuses writes with a lower one. The check and
// the write happen under one lock (in a database: one conditional update).
type fencedStore struct {
	mu      sync.Mutex
	highest uint64
	value   string
}

func (s *fencedStore) Write(token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("%w: %d < %d", errStale, token, s.highest)
	}
	s.highest, s.value = token, value
	return nil
}

// A holder whose lease ran out while it was paused still carries its old
// token; the store, not the holder, catches the stale write.
func Example_storageCheck() {
	ctx := context.Background()
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	c := fencing.New(mem)
	store := &fencedStore{}

	a, _ := c.Grant(ctx, "orders/42", 10*time.Second)
	clock.Advance(15 * time.Second) // A stalls past timeout + margin
	b, _ := c.Grant(ctx, "orders/42", 10*time.Second)

	fmt.Println("B writes:", store.Write(b.Token, "from B"))
	fmt.Println("A writes:", store.Write(a.Token, "from A"))
	fmt.Println("value:", store.value)
	// Output:
	// B writes: <nil>
	// A writes: stale token: 1 < 2
	// value: from B
}
