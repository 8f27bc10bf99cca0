package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// BenchmarkGrantRefused is the Coordinator's own cost on the path a waiter
// takes again and again: a grant refused because the key is held. The
// in-memory backend's part of it is about 100 ns.
func BenchmarkGrantRefused(b *testing.B) {
	c := fencing.New(memorybackend.New())
	ctx := context.Background()
	if _, err := c.Grant(ctx, "k", time.Minute); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Grant(ctx, "k", time.Minute); !errors.Is(err, fencing.ErrLeaseHeld) {
			b.Fatalf("Grant on a held key: %v", err)
		}
	}
}

// BenchmarkGrantRelease is the Coordinator's Grant and Release of a free key
// on the in-memory backend, the path bench's memory report times, for
// profiling: go test -run '^$' -bench GrantRelease -cpuprofile cpu.out.
func BenchmarkGrantRelease(b *testing.B) {
	c := fencing.New(memorybackend.New())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Grant(ctx, "orders/w00/0001", time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(ctx, l.Key, l.ID); err != nil {
			b.Fatal(err)
		}
	}
}
