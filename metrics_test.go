package fencing_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// meter is an SDK MeterProvider with a ManualReader, and what it collected.
type meter struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMeter(t *testing.T) *meter {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return &meter{t: t, reader: r, mp: mp}
}

// point is one data point: its attributes as "k=v,k=v" (sorted), and its
// value (a sum's value, a histogram's count).
type point struct {
	attrs string
	value int64
}

// collect returns every data point of the metric name.
func (m *meter) collect(name string) []point {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatalf("Collect: %v", err)
	}
	var out []point
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != guard.MeterName {
			m.t.Errorf("scope %q, want %q (the guards' too)", sm.Scope.Name, guard.MeterName)
		}
		for _, md := range sm.Metrics {
			if md.Name != name {
				continue
			}
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{attrString(dp.Attributes), dp.Value})
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{attrString(dp.Attributes), int64(dp.Count)})
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, point{attrString(dp.Attributes), dp.Value})
				}
			default:
				m.t.Fatalf("%s: unexpected data %T", name, md.Data)
			}
		}
	}
	return out
}

// value returns the value of name's point with exactly attrs, or 0.
func (m *meter) value(name, attrs string) int64 {
	m.t.Helper()
	for _, p := range m.collect(name) {
		if p.attrs == attrs {
			return p.value
		}
	}
	return 0
}

// sum returns the sum of name's histogram point with exactly attrs, or 0.
func (m *meter) sum(name, attrs string) float64 {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatalf("Collect: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if h, ok := md.Data.(metricdata.Histogram[float64]); ok && md.Name == name {
				for _, dp := range h.DataPoints {
					if attrString(dp.Attributes) == attrs {
						return dp.Sum
					}
				}
			}
		}
	}
	return 0
}

func attrString(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	return strings.Join(parts, ",")
}

const mem = "fencing.backend=memorybackend"

func op(operation, outcome string) string {
	return mem + ",fencing.operation=" + operation + ",fencing.outcome=" + outcome
}

func TestMetricsRequests(t *testing.T) {
	m := newMeter(t)
	e := newEnv(t, fencing.WithMeterProvider(m.mp))
	ctx := context.Background()
	key := "secret-customer-key"

	a := e.grant(t, key, time.Minute)
	if _, err := e.c.Grant(ctx, key, time.Minute); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("second grant: %v", err)
	}
	if _, err := e.c.Renew(ctx, key, a.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Renew(ctx, key, "not-the-lease", time.Minute); !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Fatalf("foreign renew: %v", err)
	}
	if err := e.c.Release(ctx, key, a.ID); err != nil {
		t.Fatal(err)
	}
	e.grant(t, key, time.Minute)
	if ended, err := e.c.ForceRelease(ctx, key); err != nil || !ended {
		t.Fatalf("ForceRelease: %v, %v", ended, err)
	}
	if ended, err := e.c.ForceRelease(ctx, key); err != nil || ended {
		t.Fatalf("second ForceRelease: %v, %v", ended, err)
	}
	if _, err := e.c.Inspect(ctx, key); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, attrs string
		want        int64
	}{
		{fencing.MetricGrants, op("grant", "ok"), 2},
		{fencing.MetricGrants, op("grant", "held"), 1},
		{fencing.MetricRenewals, op("renew", "ok"), 1},
		{fencing.MetricRenewals, op("renew", "not_found"), 1},
		{fencing.MetricReleases, op("release", "ok"), 1},
		{fencing.MetricReleases, op("force_release", "ok"), 1}, // the second ended nothing
		{fencing.MetricOperationDuration, op("grant", "ok"), 2},
		{fencing.MetricOperationDuration, op("grant", "held"), 1},
		{fencing.MetricOperationDuration, op("release", "ok"), 1},
		{fencing.MetricOperationDuration, op("force_release", "ok"), 2},
		{fencing.MetricOperationDuration, op("inspect", "ok"), 1},
	} {
		if got := m.value(c.name, c.attrs); got != c.want {
			t.Errorf("%s{%s} = %d, want %d; all points: %v", c.name, c.attrs, got, c.want, m.collect(c.name))
		}
	}
	// Low cardinality: no attribute carries the key.
	for _, name := range []string{fencing.MetricGrants, fencing.MetricRenewals, fencing.MetricReleases, fencing.MetricOperationDuration} {
		for _, p := range m.collect(name) {
			if strings.Contains(p.attrs, key) {
				t.Errorf("%s has the key in its attributes: %s", name, p.attrs)
			}
		}
	}
}

// newMetered returns a Coordinator on a memory backend that records on m.
func newMetered(t *testing.T) (*meter, *fencing.Coordinator) {
	t.Helper()
	m := newMeter(t)
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	return m, fencing.New(b, fencing.WithMeterProvider(m.mp))
}

// lockAndRelease calls c.Lock on key in a goroutine of its own and releases
// what it gets; the channel receives the first error, or nil.
func lockAndRelease(ctx context.Context, c *fencing.Coordinator, key string) <-chan error {
	locked := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctx, key, time.Minute)
		if err == nil {
			err = w.Release(ctx)
		}
		locked <- err
	}()
	return locked
}

func TestMetricsLeaseLostAndLockWait(t *testing.T) {
	m, c := newMetered(t)
	ctx := context.Background()

	h, err := c.Hold(ctx, "k", 600*time.Millisecond, fencing.WithRenewInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	locked := lockAndRelease(ctx, c, "k")
	if _, err := c.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the held lease was not lost after a forced release")
	}
	if err := h.Release(ctx); !errors.Is(err, fencing.ErrLeaseLost) {
		t.Errorf("Release after the loss: %v, want ErrLeaseLost", err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if got := m.value(fencing.MetricLeasesLost, mem+",fencing.reason=rejected"); got != 1 {
		t.Errorf("leases lost (rejected) = %d, want 1; points %v", got, m.collect(fencing.MetricLeasesLost))
	}
	if got := m.value(fencing.MetricLockWait, mem); got != 1 {
		t.Errorf("lock waits = %d, want 1; points %v", got, m.collect(fencing.MetricLockWait))
	}
}

func TestMetricsOffWithNilProvider(t *testing.T) {
	e := newEnv(t, fencing.WithMeterProvider(nil))
	l := e.grant(t, "k", time.Minute) // must not panic
	if err := e.c.Release(context.Background(), "k", l.ID); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsGlobalProviderInstalledLater checks the default: a Coordinator
// made before the program installs an SDK with otel.SetMeterProvider records
// on it from then on, as does one made after. It runs in a process of its
// own, since the global provider can be installed only once.
func TestMetricsGlobalProviderInstalledLater(t *testing.T) {
	const env = "FENCING_TEST_GLOBAL_PROVIDER"
	if os.Getenv(env) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMetricsGlobalProviderInstalledLater$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), env+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestMetricsGlobalProviderInstalledLater")) {
			t.Fatalf("the test in a process of its own: %v\n%s", err, out)
		}
		return
	}
	if !fencing.IsGlobalDelegate(otel.GetMeterProvider()) {
		t.Fatalf("otel.GetMeterProvider() = %T, not recognised as the global default: a Coordinator pays an Enabled call per instrument", otel.GetMeterProvider())
	}
	ctx := context.Background()
	grantRelease := func(c *fencing.Coordinator) {
		t.Helper()
		l, err := c.Grant(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, "k", l.ID); err != nil {
			t.Fatal(err)
		}
	}
	before := fencing.New(memorybackend.New())
	grantRelease(before) // nothing to record on yet
	m := newMeter(t)
	otel.SetMeterProvider(m.mp)
	if fencing.IsGlobalDelegate(otel.GetMeterProvider()) {
		t.Fatal("the installed SDK provider is taken for the global default")
	}
	grantRelease(before)
	after := fencing.New(memorybackend.New())
	grantRelease(after)
	if got := m.value(fencing.MetricGrants, op("grant", "ok")); got != 2 {
		t.Errorf("grants = %d, want 2 (one per Coordinator, after SetMeterProvider); points %v", got, m.collect(fencing.MetricGrants))
	}
	if got := m.value(fencing.MetricReleases, op("release", "ok")); got != 2 {
		t.Errorf("releases = %d, want 2; points %v", got, m.collect(fencing.MetricReleases))
	}
	if got := m.value(fencing.MetricOperationDuration, op("release", "ok")); got != 2 {
		t.Errorf("release durations = %d, want 2; points %v", got, m.collect(fencing.MetricOperationDuration))
	}
}

func TestLoggerNeverShowsLeaseID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, fencing.WithLogger(log))
	ctx := context.Background()
	a := e.grant(t, "orders/7", time.Minute)
	if _, err := e.c.Renew(ctx, "orders/7", a.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	e.c.Grant(ctx, "orders/7", time.Minute)
	if err := e.c.Release(ctx, "orders/7", a.ID); err != nil {
		t.Fatal(err)
	}
	e.grant(t, "orders/7", time.Minute)
	e.c.ForceRelease(ctx, "orders/7")
	out := buf.String()
	for _, want := range []string{"fencing: grant", "fencing: renew", "fencing: release", "fencing: forced release", `key=orders/7`, "token=1", "key held by a live lease"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, a.ID) {
		t.Errorf("log shows the lease ID:\n%s", out)
	}
}

func TestNoLogsByDefault(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(prev)
	e := newEnv(t)
	e.grant(t, "k", time.Minute)
	if buf.Len() != 0 {
		t.Errorf("a Coordinator without WithLogger logged:\n%s", buf.String())
	}
}

// BenchmarkMetrics measures a grant and a release on the in-memory backend
// without metrics (nil provider), with the default global provider and no
// SDK installed (the no-op a user who configured nothing gets), and with an
// SDK provider and a reader. Compare the first two: the cost of metrics
// when not configured.
func BenchmarkMetrics(b *testing.B) {
	r := sdkmetric.NewManualReader()
	sdk := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer sdk.Shutdown(context.Background())
	// Spans are made and sampled, and exported nowhere: the cost of the
	// instrumentation and the SDK, not of an exporter.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	for _, bc := range []struct {
		name string
		opts []fencing.Option
	}{
		{"off", []fencing.Option{fencing.WithMeterProvider(nil)}},
		{"default", nil},
		{"sdk", []fencing.Option{fencing.WithMeterProvider(sdk)}},
		{"sdk+trace", []fencing.Option{fencing.WithMeterProvider(sdk), fencing.WithTracerProvider(tp)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			mem := memorybackend.New()
			defer mem.Close()
			c := fencing.New(mem, bc.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.Grant(ctx, "k", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Release(ctx, "k", l.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMetricsHandoffTwoWaiters: with Lock calls waiting on one key, one
// release is one handoff, to whichever waiter got the key; the next
// waiter's grant, after the first one's release, is a handoff of its own,
// measured from that release; and a grant that follows a release this
// Coordinator did not see is none, not a handoff from an earlier release.
func TestMetricsHandoffTwoWaiters(t *testing.T) {
	m := newMeter(t)
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	c := fencing.New(b, fencing.WithMeterProvider(m.mp))
	other := fencing.New(b) // another process's Coordinator: its releases are not seen
	ctx := context.Background()
	got := make(chan *fencing.Held, 3)
	lock := func() {
		go func() {
			h, err := c.Lock(ctx, "k", time.Minute)
			if err != nil {
				t.Errorf("Lock: %v", err)
			}
			got <- h
		}()
	}
	// next releases held through release and returns the waiter granted
	// next, and the time from the release's call to that grant's return.
	next := func(release func() error) (*fencing.Held, time.Duration) {
		t.Helper()
		released := time.Now()
		if err := release(); err != nil {
			t.Fatal(err)
		}
		h := <-got
		bound := time.Since(released)
		if h == nil {
			t.FailNow()
		}
		t.Cleanup(func() { h.Release(ctx) })
		return h, bound
	}
	handoffs := func() (int64, float64) {
		return m.value(fencing.MetricLockHandoff, mem), m.sum(fencing.MetricLockHandoff, mem)
	}

	h, err := c.Hold(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lock()
	lock()
	lock()
	for m.value(fencing.MetricLockWaiters, mem+",fencing.fifo=false") != 3 {
		time.Sleep(time.Millisecond) // until the Lock calls wait; the test's timeout bounds it
	}
	first, bound := next(func() error { return h.Release(ctx) })
	n, sum := handoffs()
	if n != 1 || sum <= 0 || sum > bound.Seconds() {
		t.Fatalf("one release, one waiter granted: %d handoffs taking %vs; want 1, of more than 0 and at most the %v from the release's call to the Lock's return", n, sum, bound)
	}

	second, bound := next(func() error { return first.Release(ctx) })
	n2, sum2 := handoffs()
	if d := sum2 - sum; n2 != 2 || d <= 0 || d > bound.Seconds() {
		t.Fatalf("after the first waiter's release, %d handoffs, the new one taking %vs; want 2, the new one of more than 0 and at most the %v from that release's call to the Lock's return", n2, d, bound)
	}

	// The second waiter's lease is released by another Coordinator: the
	// third waiter's grant follows no release this one saw.
	next(func() error { return other.Release(ctx, "k", second.Lease().ID) })
	if n, _ := handoffs(); n != 2 {
		t.Fatalf("a waiter granted after a release this Coordinator did not see: %d handoffs, want still 2 (an earlier release counted again); points %v", n, m.collect(fencing.MetricLockHandoff))
	}
}

// TestMetricsHandoff: the release of a key a Lock waits for, and that
// Lock's grant, is one handoff (MetricLockHandoff); a release and a grant
// with no Lock waiting are none.
func TestMetricsHandoff(t *testing.T) {
	m, c := newMetered(t)
	ctx := context.Background()

	for range 2 {
		l, err := c.Grant(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, "k", l.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.value(fencing.MetricLockHandoff, mem); got != 0 {
		t.Fatalf("handoffs without a waiter = %d, want 0", got)
	}

	h, err := c.Hold(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	locked := lockAndRelease(ctx, c, "k")
	for m.value(fencing.MetricLockWaiters, mem+",fencing.fifo=false") != 1 {
		time.Sleep(time.Millisecond) // until the Lock waits; the test's timeout bounds it
	}
	released := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("Lock: %v", err)
	}
	bound := time.Since(released)
	if got := m.value(fencing.MetricLockHandoff, mem); got != 1 {
		t.Fatalf("handoffs = %d, want 1; points %v", got, m.collect(fencing.MetricLockHandoff))
	}
	if sum := m.sum(fencing.MetricLockHandoff, mem); sum <= 0 || sum > bound.Seconds() {
		t.Errorf("handoff took %vs, want more than 0 and at most the %v from the release's call to the Lock's return", sum, bound)
	}

	// A release that fails is no handoff: a waiter that gets the key once
	// the lease expired adds none.
	l, err := c.Grant(ctx, "expiring", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	locked = lockAndRelease(ctx, c, "expiring")
	for m.value(fencing.MetricLockWaiters, mem+",fencing.fifo=false") != 1 {
		time.Sleep(time.Millisecond)
	}
	if err := c.Release(ctx, "expiring", l.ID+"x"); err == nil {
		t.Fatal("Release with another lease's ID succeeded")
	}
	if err := <-locked; err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if got := m.value(fencing.MetricLockHandoff, mem); got != 1 {
		t.Fatalf("handoffs after a failed release and an expiry = %d, want still 1", got)
	}
}
