package memorybackend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// What is specific to memory's line (the rest is in the conformance suite):
// a leave wakes only the waiter directly behind it, and an expiry, which no
// timer sees, wakes it when the line is next touched.

func woken(sub backend.Subscription) bool {
	select {
	case <-sub.Freed():
		return true
	default:
		return false
	}
}

func TestQueueWakesOnlyTheNext(t *testing.T) {
	clock := memorybackend.NewFakeClock(epoch)
	b := memorybackend.New(memorybackend.WithClock(clock))
	ctx := context.Background()
	const n = 5
	subs := make([]backend.Subscription, n)
	for i := range n {
		w := fmt.Sprintf("w%d", i)
		sub, err := b.NotifyTurn(ctx, "k", w)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs[i] = sub
		ttl := time.Minute
		if i == 2 {
			ttl = time.Second // w2 dies in line
		}
		if _, err := b.Enqueue(ctx, "k", w, ttl); err != nil {
			t.Fatal(err)
		}
	}
	wantWoken := func(what string, want ...int) {
		t.Helper()
		for i, sub := range subs {
			got := woken(sub)
			if got != (len(want) > 0 && want[0] == i) {
				t.Fatalf("%s: waiter %d woken %v; want only waiter %v woken", what, i, got, want)
			}
		}
	}
	wantWoken("after the joins")
	if err := b.Dequeue(ctx, "k", "w0"); err != nil {
		t.Fatal(err)
	}
	wantWoken("after the head left", 1)
	if err := b.Dequeue(ctx, "k", "w3"); err != nil { // a waiter in the middle gives up
		t.Fatal(err)
	}
	wantWoken("after a middle waiter left", 4)
	clock.Advance(time.Second) // w2's entry expires, unseen
	wantWoken("after an expiry nothing touched")
	if _, err := b.Enqueue(ctx, "k", "w1", time.Minute); err != nil { // w1 renews
		t.Fatal(err)
	}
	wantWoken("after the expiry was seen", 4)
	if err := b.Dequeue(ctx, "k", "w1"); err != nil {
		t.Fatal(err)
	}
	wantWoken("after the head left", 4)
	p, err := b.Enqueue(ctx, "k", "w4", time.Minute)
	if err != nil || p.Ahead != 0 {
		t.Fatalf("Enqueue of the last waiter = %+v, %v; want the head", p, err)
	}
}
