// Package metrictest reads OpenTelemetry metrics in tests: a MeterProvider
// backed by the SDK's ManualReader, the sum of an Int64 counter and the
// count of a histogram.
package metrictest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Reader is a MeterProvider whose measurements a test can read back.
type Reader struct {
	*sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
}

// New returns a Reader, shut down when t ends.
func New(t testing.TB) *Reader {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return &Reader{MeterProvider: mp, reader: r}
}

// Sum returns the total of the Int64 sum instrument called name, over all
// its attribute sets (zero when nothing was recorded).
func (r *Reader) Sum(t testing.TB, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					total += dp.Value
				}
			}
		}
	}
	return total
}

// Count returns how many values the Float64 histogram called name
// recorded with the attribute attr=value (every attribute set when attr is
// empty).
func (r *Reader) Count(t testing.TB, name string, attr attribute.Key, value string) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	var total uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					if v, ok := dp.Attributes.Value(attr); attr == "" || ok && v.Emit() == value {
						total += dp.Count
					}
				}
			}
		}
	}
	return total
}
