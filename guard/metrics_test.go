package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/metrictest"
)

func TestMemoryCountsStaleTokens(t *testing.T) {
	mp := metrictest.New(t)
	g := guard.NewMemory(guard.WithMeterProvider(mp))
	ctx := context.Background()
	if err := g.Admit(ctx, "r", 5); err != nil {
		t.Fatalf("Admit 5: %v", err)
	}
	if err := g.Admit(ctx, "r", 5); err != nil {
		t.Fatalf("Admit 5 again: %v", err)
	}
	if err := g.Write(ctx, "r", 4, func() error { return nil }); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("Write 4 after 5: %v, want ErrStaleToken", err)
	}
	if got := mp.Sum(t, fencing.MetricStaleTokens); got != 1 {
		t.Fatalf("%s = %d, want 1 (one stale write refused)", fencing.MetricStaleTokens, got)
	}
}
