package fencing_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// retaining is a memory backend with a retention of 1 s on a fake clock.
func retaining() (*memorybackend.FakeClock, *memorybackend.Backend) {
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return clock, memorybackend.New(memorybackend.WithClock(clock), memorybackend.WithRetention(time.Second))
}

// reclaim calls drive (which grants on a key of its own) until b has
// reclaimed n keys, and returns b's size then.
func reclaim(t *testing.T, b *memorybackend.Backend, n uint64, drive func()) backend.StoreSize {
	t.Helper()
	for i := 0; ; i++ {
		st, err := b.Size(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Reclaimed >= n {
			return st
		}
		if i == 1000 {
			t.Fatalf("reclaimed %d of %d idle keys after %d grants", st.Reclaimed, n, i)
		}
		drive()
	}
}

// The store's records and reclaimed keys are read from a backend.Sizer at
// each collection.
func TestMetricsStoreSize(t *testing.T) {
	ctx := context.Background()
	clock, b := retaining()
	m := newMeter(t)
	c := fencing.New(b, fencing.WithMeterProvider(m.mp))
	cycle := func(key string) {
		t.Helper()
		l, err := c.Grant(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, key, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	const keys = 10
	for i := range keys {
		cycle(string(rune('a' + i)))
	}
	if got := m.collect(fencing.MetricStoreRecords); len(got) != 1 || got[0] != (point{mem, keys}) {
		t.Fatalf("%s = %v, want [{%s %d}]", fencing.MetricStoreRecords, got, mem, keys)
	}
	if got := m.value(fencing.MetricStoreReclaimed, mem); got != 0 {
		t.Fatalf("%s = %d before any reclaim, want 0", fencing.MetricStoreReclaimed, got)
	}
	// Past the retention, grants on another key drive the reclaim.
	clock.Advance(2 * time.Second)
	st := reclaim(t, b, keys, func() { cycle("other") })
	if got := m.value(fencing.MetricStoreReclaimed, mem); got != keys {
		t.Errorf("%s = %d, want %d", fencing.MetricStoreReclaimed, got, keys)
	}
	if got := m.value(fencing.MetricStoreRecords, mem); got != st.Records || got >= keys {
		t.Errorf("%s = %d after the reclaim, want the backend's %d", fencing.MetricStoreRecords, got, st.Records)
	}
	// A closed backend reports nothing, and the collection does not fail.
	b.Close()
	if got := m.collect(fencing.MetricStoreRecords); len(got) != 0 {
		t.Errorf("%s of a closed backend = %v, want nothing", fencing.MetricStoreRecords, got)
	}
}

// onlyBackend hides every capability of the backend it wraps.
type onlyBackend struct{ backend.Backend }

func TestMetricsStoreSizeOnlyForSizers(t *testing.T) {
	m := newMeter(t)
	c := fencing.New(onlyBackend{memorybackend.New()}, fencing.WithMeterProvider(m.mp))
	if _, err := c.Grant(context.Background(), "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{fencing.MetricStoreRecords, fencing.MetricStoreReclaimed} {
		if got := m.collect(name); len(got) != 0 {
			t.Errorf("%s of a backend with no Sizer = %v, want nothing", name, got)
		}
	}
}

// A Coordinator has no Close: its callback goes when it is garbage, so
// Coordinators made and dropped do not pile up on the provider.
func TestMetricsStoreSizeGoesWithTheCoordinator(t *testing.T) {
	m := newMeter(t)
	b := memorybackend.New()
	func() {
		c := fencing.New(b, fencing.WithMeterProvider(m.mp))
		if _, err := c.Grant(context.Background(), "k", time.Minute); err != nil {
			t.Fatal(err)
		}
	}()
	if got := m.collect(fencing.MetricStoreRecords); len(got) != 1 {
		t.Fatalf("%s = %v while the Coordinator may live, want one point", fencing.MetricStoreRecords, got)
	}
	// The cleanup runs on its own goroutine after a GC finds the
	// Coordinator unreachable; a generous bound, as the machine is loaded.
	deadline := time.Now().Add(10 * time.Second)
	for len(m.collect(fencing.MetricStoreRecords)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still reported 10 s after the Coordinator became garbage", fencing.MetricStoreRecords)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// Coordinators over one backend share its callback: the reclaimed keys are
// counted once, not once per Coordinator.
func TestMetricsStoreSizeOncePerBackend(t *testing.T) {
	ctx := context.Background()
	clock, b := retaining()
	m := newMeter(t)
	c := fencing.New(b, fencing.WithMeterProvider(m.mp))
	other := fencing.New(b, fencing.WithMeterProvider(m.mp))
	l, err := other.Grant(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx, "a", l.ID); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	reclaim(t, b, 1, func() {
		if _, err := c.Grant(ctx, "b", time.Minute); err != nil && !errors.Is(err, fencing.ErrLeaseHeld) {
			t.Fatal(err)
		}
	})
	if got := m.value(fencing.MetricStoreReclaimed, mem); got != 1 {
		t.Errorf("%s = %d with two Coordinators over the backend, want 1", fencing.MetricStoreReclaimed, got)
	}
	runtime.KeepAlive(other)
}
