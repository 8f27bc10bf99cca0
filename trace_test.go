package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencing-go/fencing"
)

// tracer is an SDK TracerProvider with an in-memory span recorder.
func tracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, sr
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func TestTraceGrantRenewRelease(t *testing.T) {
	tp, sr := tracer(t)
	e := newEnv(t, fencing.WithTracerProvider(tp), fencing.WithDefaultOwner("host-3"), fencing.WithKeyLabel(func(k string) string { return "label:" + k }))
	ctx := context.Background()
	l := e.grant(t, "k", time.Minute)
	if _, err := e.c.Grant(ctx, "k", time.Minute); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("second grant: %v", err)
	}
	if _, err := e.c.Renew(ctx, "k", l.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Release(ctx, "k", l.ID); err != nil {
		t.Fatal(err)
	}
	type got struct{ name, key, owner, token, outcome string }
	var spans []got
	for _, s := range sr.Ended() {
		spans = append(spans, got{s.Name(), spanAttr(s, "fencing.key"), spanAttr(s, "fencing.owner"), spanAttr(s, "fencing.token"), spanAttr(s, "fencing.outcome")})
		if spanAttr(s, "fencing.key.hash") != "" {
			t.Errorf("%s has a key hash with WithKeyLabel", s.Name())
		}
	}
	want := []got{
		{fencing.SpanGrant, "label:k", "host-3", "1", "ok"},
		{fencing.SpanGrant, "label:k", "host-3", "", "held"},
		{fencing.SpanRenew, "label:k", "", "1", "ok"},
		{fencing.SpanRelease, "label:k", "", "", "ok"},
	}
	if len(spans) != len(want) {
		t.Fatalf("spans %+v, want %+v", spans, want)
	}
	for i := range want {
		if spans[i] != want[i] {
			t.Errorf("span %d: %+v, want %+v", i, spans[i], want[i])
		}
	}
}

// TestTraceHeldLost: a held lease whose renewal is refused ends its span
// as lost (reason rejected), with the renewals as its children, and is
// counted in the held-duration histogram with that reason.
func TestTraceHeldLost(t *testing.T) {
	tp, sr := tracer(t)
	m := newMeter(t)
	e := newEnv(t, fencing.WithTracerProvider(tp), fencing.WithMeterProvider(m.mp))
	ctx := context.Background()
	h, err := e.c.Hold(ctx, "k", 300*time.Millisecond, fencing.WithRenewInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	h.Release(ctx)
	var held sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == fencing.SpanHeld {
			held = s
		}
	}
	if held == nil {
		t.Fatal("no held span")
	}
	if r := spanAttr(held, "fencing.reason"); r != "rejected" {
		t.Errorf("held span's reason %q, want rejected", r)
	}
	renewals := 0
	for _, s := range sr.Ended() {
		if s.Name() == fencing.SpanRenew {
			renewals++
			if s.Parent().SpanID() != held.SpanContext().SpanID() {
				t.Errorf("renew span's parent is not the held span")
			}
		}
	}
	if renewals == 0 {
		t.Error("no renew span")
	}
	if n := m.value(fencing.MetricHeldDuration, mem+",fencing.reason=rejected"); n != 1 {
		t.Errorf("held duration {reason=rejected}: %d, want 1", n)
	}
}

func TestMetricsLockDelayRefusal(t *testing.T) {
	m := newMeter(t)
	e := newEnv(t, fencing.WithMeterProvider(m.mp), fencing.WithDefaultLockDelay(time.Minute))
	ctx := context.Background()
	e.grant(t, "k", time.Minute)
	if _, err := e.c.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Grant(ctx, "k", time.Minute); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("grant in a lock delay: %v", err)
	}
	if n := m.value(fencing.MetricLockDelayRefusals, mem); n != 1 {
		t.Errorf("%s: %d, want 1", fencing.MetricLockDelayRefusals, n)
	}
}

// TestTraceOffByDefault: without WithTracerProvider nothing is recorded,
// even with a global TracerProvider installed.
func TestTraceOffByDefault(t *testing.T) {
	tp, sr := tracer(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)
	e := newEnv(t)
	l := e.grant(t, "k", time.Minute)
	if err := e.c.Release(context.Background(), "k", l.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(sr.Ended()); n != 0 {
		t.Errorf("%d spans without WithTracerProvider", n)
	}
}
