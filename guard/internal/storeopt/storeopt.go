// Package storeopt is the one home of the options every store guard
// (guard/etcdguard, guard/redisguard, guard/sqlguard) takes: the counter of
// the writes refused for a stale token (WithMeterProvider) and the mint
// check (WithMintCheck). A guard keeps a Shared in its Guard, has those
// two options set it, and calls Apply in New.
package storeopt

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencing-go/fencing/guard"
)

// Shared holds the options every store guard takes.
type Shared struct {
	// Metrics counts the writes the guard refused for a stale token. Apply
	// sets it; it is never nil after.
	Metrics *guard.Metrics
	// Mint is the mint check run before anything is sent (nil: none; a nil
	// *guard.MintCheck admits every token).
	Mint *guard.MintCheck

	mp    metric.MeterProvider
	mpSet bool
}

// SetMeterProvider is what a guard's WithMeterProvider does: Apply puts the
// counters on mp (a nil mp records nothing) instead of the global provider.
func (s *Shared) SetMeterProvider(mp metric.MeterProvider) { s.mp, s.mpSet = mp, true }

// Apply runs opts on g in order, then makes s.Metrics, the counters of the
// guard named name, on the provider a WithMeterProvider gave, or else on
// otel.GetMeterProvider() (a no-op until an OpenTelemetry SDK is
// installed).
func Apply[G any, O ~func(*G)](g *G, s *Shared, name string, opts []O) {
	for _, opt := range opts {
		opt(g)
	}
	mp := s.mp
	if !s.mpSet {
		mp = otel.GetMeterProvider()
	}
	s.Metrics = guard.NewMetrics(mp, name)
}
