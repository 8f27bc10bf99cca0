package guard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/testing/metrictest"
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
	if got := mp.Sum(t, guard.MetricStaleTokens); got != 1 {
		t.Fatalf("%s = %d, want 1 (one stale write refused)", guard.MetricStaleTokens, got)
	}
}

// A guard of one's own counts its stale writes with a *Metrics: Observe
// counts an error wrapping ErrStaleToken, by guard, and returns every error
// unchanged; a nil *Metrics records nothing.
func TestMetricsObserve(t *testing.T) {
	mp := metrictest.New(t)
	g := guard.NewMetrics(mp, "testguard")
	ctx := context.Background()
	stale := fmt.Errorf("write: %w", guard.ErrStaleToken)
	if err := g.Observe(ctx, stale); err != stale {
		t.Errorf("Observe changed the error: %v", err)
	}
	g.Observe(ctx, nil)
	g.Observe(ctx, errors.New("other"))
	if got := mp.Sum(t, guard.MetricStaleTokens); got != 1 {
		t.Errorf("%s = %d, want 1", guard.MetricStaleTokens, got)
	}
	var none *guard.Metrics
	if err := none.Observe(ctx, stale); err != stale {
		t.Errorf("a nil *Metrics changed the error: %v", err)
	}
}

// TestMemoryMeterProviderNil checks that a nil provider means what it means
// for the Coordinator: nothing is recorded, while a guard made without the
// option records on the global provider. It runs in a process of its own,
// since the global provider can be installed only once.
func TestMemoryMeterProviderNil(t *testing.T) {
	const env = "FENCING_TEST_GUARD_GLOBAL_PROVIDER"
	if os.Getenv(env) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryMeterProviderNil$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), env+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestMemoryMeterProviderNil")) {
			t.Fatalf("the test in a process of its own: %v\n%s", err, out)
		}
		return
	}
	mp := metrictest.New(t)
	otel.SetMeterProvider(mp)
	ctx := context.Background()
	stale := func(g *guard.Memory) {
		t.Helper()
		if err := g.Admit(ctx, "r", 5); err != nil {
			t.Fatalf("Admit 5: %v", err)
		}
		if err := g.Admit(ctx, "r", 4); !errors.Is(err, guard.ErrStaleToken) {
			t.Fatalf("Admit 4 after 5: %v, want ErrStaleToken", err)
		}
	}
	stale(guard.NewMemory(guard.WithMeterProvider(nil)))
	if got := mp.Sum(t, guard.MetricStaleTokens); got != 0 {
		t.Fatalf("with a nil provider: %s = %d, want 0", guard.MetricStaleTokens, got)
	}
	stale(guard.NewMemory())
	if got := mp.Sum(t, guard.MetricStaleTokens); got != 1 {
		t.Fatalf("without the option: %s = %d, want 1 (on the global provider)", guard.MetricStaleTokens, got)
	}
}
