package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// TestGrantReleaseAllocs: a Grant and Release through the Coordinator on
// the in-memory backend, with no tracer, logger or metrics (the global
// provider may hold another test's SDK, so metrics are off by option),
// allocate only the lease ID: no closure, span, context or error on the
// way (BenchmarkGrantRelease is the same pair on the default options).
func TestGrantReleaseAllocs(t *testing.T) {
	c := fencing.New(memorybackend.New(), fencing.WithMeterProvider(nil))
	ctx := context.Background()
	a := testing.AllocsPerRun(1000, func() {
		l, err := c.Grant(ctx, "orders/w00/0001", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, l.Key, l.ID); err != nil {
			t.Fatal(err)
		}
	})
	if a > 1 {
		t.Errorf("Grant and Release allocate %v times, want 1 (the lease ID)", a)
	}
}
