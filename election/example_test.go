package election_test

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/election"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// Two candidates: the first leads, the second waits; when the first
// resigns, the second leads with a larger token, and the guard refuses the
// first leader's late write.
func Example() {
	b := memorybackend.New()
	defer b.Close()
	c := fencing.New(b)
	ctx := context.Background()
	e := election.New(c, "jobs/scheduler", 10*time.Second)
	g := guard.NewMemory()

	first, err := e.Campaign(ctx, "scheduler-a")
	if err != nil {
		panic(err)
	}
	l, _ := e.Leader(ctx)
	fmt.Printf("leader %s, term %d\n", l.Identity, l.Token)

	second := make(chan *fencing.Held)
	go func() {
		h, _ := e.Campaign(ctx, "scheduler-b") // waits for the office
		second <- h
	}()
	first.Release(ctx) // resign
	h := <-second
	defer h.Release(ctx)
	g.Admit(ctx, "schedule", h.Token())
	l, _ = e.Leader(ctx)
	fmt.Printf("leader %s, term %d\n", l.Identity, l.Token)

	err = g.Write(ctx, "schedule", first.Token(), func() error { return nil })
	fmt.Println("late write of term", first.Token(), "refused:", err != nil)
	// Output:
	// leader scheduler-a, term 1
	// leader scheduler-b, term 2
	// late write of term 1 refused: true
}

// Run leads while this candidate holds the office, and resigns when its
// context ends or lead is done.
func ExampleElection_Run() {
	b := memorybackend.New()
	defer b.Close()
	e := election.New(fencing.New(b), "jobs/report", 10*time.Second)
	err := e.Run(context.Background(), "reporter-1", func(ctx context.Context, term fencing.Lease) error {
		fmt.Println("leading term", term.Token)
		return nil // done: Run resigns and returns nil
	})
	l, _ := e.Leader(context.Background())
	fmt.Println("Run:", err, "- office vacant:", !l.Live)
	// Output:
	// leading term 1
	// Run: <nil> - office vacant: true
}

// Observe reports each term and each vacancy. Here it is read with
// iter.Pull2, one state at a time; a range loop is the usual way.
func ExampleElection_Observe() {
	b := memorybackend.New()
	defer b.Close()
	e := election.New(fencing.New(b), "jobs/index", 10*time.Second)
	ctx := context.Background()
	next, stop := iter.Pull2(e.Observe(ctx))
	defer stop()
	show := func() {
		l, _, _ := next()
		if l.Live {
			fmt.Printf("%s leads, term %d\n", l.Identity, l.Token)
		} else {
			fmt.Println("vacant")
		}
	}
	show()
	h, _ := e.Campaign(ctx, "indexer-1")
	show()
	h.Release(ctx)
	show()
	// Output:
	// vacant
	// indexer-1 leads, term 1
	// vacant
}
