package fencing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencing-go/fencing/backend"
)

// The store's size, read from a backend that implements backend.Sizer when
// the metrics are collected (an observable gauge and counter), never on a
// request's path.
const (
	// MetricStoreRecords is a gauge of the key records the backend's store
	// holds (backend.StoreSize.Records): keys with a live lease, in a lock
	// delay, or idle for less than the backend's retention.
	MetricStoreRecords = "fencing.store.records"
	// MetricStoreReclaimed counts the idle keys whose records the backend
	// deleted after their retention (backend.StoreSize.Reclaimed), since it
	// was made: this process's backend's work.
	MetricStoreReclaimed = "fencing.store.reclaimed"
)

// sizeKey is one backend's store instruments on one meter. Coordinators
// over the same backend share one callback: observations of one counter
// with the same attributes are summed in a collection, so a callback per
// Coordinator would count the reclaimed keys once per Coordinator.
type sizeKey struct {
	meter metric.Meter
	sizer backend.Sizer
}

// sizeReg is a shared callback and how many Coordinators use it.
type sizeReg struct {
	reg metric.Registration
	n   int
}

var sizeRegs = struct {
	sync.Mutex
	m map[sizeKey]*sizeReg
}{m: map[sizeKey]*sizeReg{}}

// observeSize registers, for a Coordinator over b, the callback that reads
// b's size on each collection, when b is a backend.Sizer and instruments
// were made, or shares the one registered for b on the same meter; each
// read is bounded by timeout (0: by the collection's context alone), the
// first Coordinator's. It returns what ends the Coordinator's use of the
// callback, or nil.
//
// The callback holds b, never the Coordinator, so that the Coordinator can
// be collected; New ends its use then (a Coordinator has no Close).
func (o *observer) observeSize(b backend.Backend, timeout time.Duration) (release func()) {
	sz, ok := b.(backend.Sizer)
	if !ok || o.meter == nil {
		return nil
	}
	key := sizeKey{o.meter, sz}
	shared := reflect.TypeOf(o.meter).Comparable() && reflect.TypeOf(sz).Comparable()
	if shared {
		sizeRegs.Lock()
		defer sizeRegs.Unlock()
		if r := sizeRegs.m[key]; r != nil {
			r.n++
			return func() { releaseSize(key) }
		}
	}
	reg := o.registerSize(sz, timeout)
	switch {
	case reg == nil:
		return nil
	case !shared:
		return func() { _ = reg.Unregister() }
	}
	sizeRegs.m[key] = &sizeReg{reg: reg, n: 1}
	return func() { releaseSize(key) }
}

// releaseSize ends one Coordinator's use of key's callback, and
// unregisters it after the last.
func releaseSize(key sizeKey) {
	sizeRegs.Lock()
	defer sizeRegs.Unlock()
	r := sizeRegs.m[key]
	if r.n--; r.n == 0 {
		delete(sizeRegs.m, key)
		_ = r.reg.Unregister()
	}
}

// registerSize makes the store instruments and registers their callback
// over sz.
func (o *observer) registerSize(sz backend.Sizer, timeout time.Duration) metric.Registration {
	records, err := o.meter.Int64ObservableGauge(MetricStoreRecords, metric.WithUnit("{record}"),
		metric.WithDescription("Key records the store holds: live, in a lock delay, or idle for less than the retention."))
	reclaimed, cErr := o.meter.Int64ObservableCounter(MetricStoreReclaimed, metric.WithUnit("{key}"),
		metric.WithDescription("Idle keys whose records the backend deleted after their retention."))
	if err = errors.Join(err, cErr); err != nil {
		otel.Handle(err)
		return nil
	}
	attrs, log := o.bAttrs, o.log
	read := func(ctx context.Context, obs metric.Observer) error {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		st, err := sz.Size(ctx)
		switch {
		case errors.Is(err, backend.ErrClosed):
			return nil // a closed backend has no size to report
		case err != nil:
			if log != nil {
				log.LogAttrs(ctx, slog.LevelWarn, "fencing: store size failed", slog.Any("error", err))
			}
			return fmt.Errorf("fencing: read the store's size: %w", err)
		}
		obs.ObserveInt64(records, st.Records, attrs)
		obs.ObserveInt64(reclaimed, int64(min(st.Reclaimed, 1<<63-1)), attrs)
		return nil
	}
	reg, err := o.meter.RegisterCallback(read, records, reclaimed)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

// releaseWhenCollected calls release once c is garbage.
func releaseWhenCollected(c *Coordinator, release func()) {
	if release != nil {
		runtime.AddCleanup(c, func(release func()) { release() }, release)
	}
}
