package bench

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// dashboardPath is the Grafana dashboard the repository ships.
const dashboardPath = "../docs/grafana/fencing.json"

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardMetricNames runs a contention that records every metric of
// the module through the OpenTelemetry Prometheus exporter, as a user's
// setup would (docs/metrics.md), and checks that every metric and label the
// dashboard's queries name is one the exporter served: a metric renamed in
// the code, or misspelled in the dashboard, fails it.
func TestDashboardMetricNames(t *testing.T) {
	metrics, labels := exportedNames(t)
	d := readDashboard(t)
	ident := regexp.MustCompile(`\bfencing_[a-z_]+\b`)
	legend := regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("a panel without a title or a query: %+v", p)
		}
		for _, q := range p.Targets {
			for _, name := range ident.FindAllString(q.Expr, -1) {
				switch {
				case metrics[name]:
					used[name] = true
				case labels[name]:
				default:
					t.Errorf("panel %q: %s is neither a metric nor a label the code exports (query %s)", p.Title, name, q.Expr)
				}
			}
			for _, m := range legend.FindAllStringSubmatch(q.LegendFormat, -1) {
				if !labels[m[1]] {
					t.Errorf("panel %q: legend label %s is not exported", p.Title, m[1])
				}
			}
		}
	}
	// What the issue asks the dashboard to show.
	for _, want := range []string{
		"fencing_lock_wait_duration_seconds_bucket", "fencing_lease_held_duration_seconds_bucket",
		"fencing_lock_waiters", "fencing_leases_lost_total", "fencing_guard_stale_tokens_total",
		"fencing_operation_duration_seconds_count", "fencing_lock_gave_up_duration_seconds_count",
	} {
		if !used[want] {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
}

// exportedNames returns the metric names (with a histogram's _bucket,
// _sum and _count series) and label names the Prometheus exporter serves
// after a contention on the in-memory backend and a guard's refusal.
func exportedNames(t *testing.T) (metrics, labels map[string]bool) {
	t.Helper()
	reg, mp, c := exportedCoordinator(t)
	ctx := context.Background()

	// A holder, a waiter that gives up, one that gets the key.
	h, err := c.Hold(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "k", time.Minute, fencing.WithWaitTimeout(20*time.Millisecond)); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("Lock on a held key: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctx, "k", time.Minute)
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	for waiting(t, reg) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A lost lease, then a refusal in its lock delay.
	lost, err := c.Hold(ctx, "d", time.Minute, fencing.WithLockDelay(time.Minute), fencing.WithRenewInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	<-lost.Done() // its next renewal is refused
	lost.Release(ctx)
	if _, err := c.Grant(ctx, "d", time.Minute); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("grant in a lock delay: %v", err)
	}
	// A guard refusing a stale token.
	g := guard.NewMemory(guard.WithMeterProvider(mp))
	if err := g.Admit(ctx, "r", 2); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "r", 1); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("stale admit: %v", err)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	metrics, labels = map[string]bool{}, map[string]bool{}
	var names []string
	for _, f := range families {
		name := f.GetName()
		names = append(names, name)
		metrics[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				metrics[name+s] = true
			}
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
	}
	sort.Strings(names)
	t.Logf("exported: %s", strings.Join(names, " "))
	return metrics, labels
}

// readDashboard reads the dashboard the repository ships.
func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// exportedCoordinator returns a Coordinator on a fresh in-memory backend
// whose metrics go through the OpenTelemetry Prometheus exporter to reg, as
// a user's setup would (docs/metrics.md), and its MeterProvider; both end
// with t.
func exportedCoordinator(t *testing.T) (*prometheus.Registry, *sdkmetric.MeterProvider, *fencing.Coordinator) {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	mem := memorybackend.New()
	t.Cleanup(func() { mem.Close() })
	return reg, mp, fencing.New(mem, fencing.WithMeterProvider(mp))
}

// waiting returns the value of the lock waiters gauge.
func waiting(t *testing.T, reg *prometheus.Registry) float64 {
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() == "fencing_lock_waiters" {
			for _, m := range f.GetMetric() {
				n += m.GetGauge().GetValue()
			}
		}
	}
	return n
}
