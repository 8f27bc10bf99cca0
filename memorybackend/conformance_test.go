package memorybackend_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/contentiontest"
	"github.com/fencing-go/fencing/memorybackend"
)

// fakeClockHarness runs the conformance suite on a fake clock, so every
// expiry case is exact and instant. The clock is shared by the backends of
// one harness; the suite makes one harness per test.
type fakeClockHarness struct{ clock *memorybackend.FakeClock }

func newHarness() *fakeClockHarness {
	return &fakeClockHarness{clock: memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
}

func (h *fakeClockHarness) NewBackend(context.Context, testing.TB) (backend.Backend, error) {
	return memorybackend.New(memorybackend.WithClock(h.clock)), nil
}

func (h *fakeClockHarness) Wait(_ context.Context, d time.Duration) error {
	h.clock.Advance(d)
	return nil
}

func (h *fakeClockHarness) Traits() conformance.Traits {
	return conformance.Traits{Now: h.clock.Now, DenseTokens: true}
}

// PresetToken implements conformance.TokenPresetter.
func (h *fakeClockHarness) PresetToken(_ context.Context, b backend.Backend, key string, token uint64) error {
	memorybackend.PresetToken(b.(*memorybackend.Backend), key, token)
	return nil
}

// NewBackendWithRetention implements conformance.Retainer.
func (h *fakeClockHarness) NewBackendWithRetention(_ context.Context, _ testing.TB, d time.Duration) (backend.Backend, error) {
	return memorybackend.New(memorybackend.WithClock(h.clock), memorybackend.WithRetention(d)), nil
}

// Records implements conformance.Retainer.
func (h *fakeClockHarness) Records(ctx context.Context, b backend.Backend) (int, error) {
	st, err := b.(backend.Sizer).Size(ctx)
	return int(st.Records), err
}

// No goroutine of a Hold, Lock or subscription outlives its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness())
}

// TestContention checks the spans and contention metrics of a contention
// on this backend (see contentiontest.Run).
func TestContention(t *testing.T) {
	contentiontest.Run(t, newHarness())
}

func BenchmarkConformance(b *testing.B) {
	conformance.RunBenchmarks(b, newHarness())
}
