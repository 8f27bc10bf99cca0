package guard

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The guards' one instrument: package fencing re-exports these names next
// to the Coordinator's, in the same instrumentation scope.
const (
	// MetricStaleTokens counts writes a guard refused for a stale token, by
	// guard (AttrGuard).
	MetricStaleTokens = "fencing.guard.stale_tokens"
	// AttrGuard is the attribute naming the guard that refused a write.
	AttrGuard = attribute.Key("fencing.guard")

	// MeterName is the instrumentation scope, the Coordinator's too.
	MeterName = "github.com/fencing-go/fencing"
)

// Metrics counts the writes a guard refused for a stale token
// (MetricStaleTokens): a guard calls Observe with the result of each Admit
// or guarded write. The zero value and a nil *Metrics record nothing.
type Metrics struct {
	stale metric.Int64Counter
	attrs metric.MeasurementOption
}

// NewMetrics returns the counters for the guard named guard (a fixed,
// low-cardinality name such as "sqlguard") on mp. A nil mp records nothing,
// as a nil mp given to the Coordinator's WithMeterProvider does; a guard
// made without its WithMeterProvider option records on
// otel.GetMeterProvider(). The result is never nil.
func NewMetrics(mp metric.MeterProvider, guard string) *Metrics {
	if mp == nil {
		return &Metrics{}
	}
	c, err := mp.Meter(MeterName).Int64Counter(MetricStaleTokens, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused for a stale fencing token."))
	if err != nil {
		otel.Handle(err)
		return &Metrics{}
	}
	return &Metrics{stale: c, attrs: metric.WithAttributeSet(attribute.NewSet(AttrGuard.String(guard)))}
}

// Observe counts err when it wraps ErrStaleToken, and returns it unchanged,
// so that a guard can write return m.Observe(ctx, err).
func (m *Metrics) Observe(ctx context.Context, err error) error {
	if m != nil && m.stale != nil && err != nil && errors.Is(err, ErrStaleToken) && m.stale.Enabled(ctx) {
		m.stale.Add(ctx, 1, m.attrs)
	}
	return err
}
