// Package spantest follows a held lease's span across a token carrier
// (httpguard, grpcguard): it holds a lease on a Coordinator that records
// spans on the OpenTelemetry SDK's in-memory recorder, and tells whether a
// span the service recorded is a remote child of the lease's.
package spantest

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// Lease is a held lease whose span a test follows.
type Lease struct {
	// Held is the lease: its Context carries its token and its span.
	Held *fencing.Held
	// Tracer records the service's spans on the lease's recorder.
	Tracer trace.Tracer
	span   trace.SpanContext
	rec    *tracetest.SpanRecorder
}

// Hold holds key on a memory backend, recording spans, until t ends.
func Hold(t *testing.T, key string) *Lease {
	t.Helper()
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	h, err := fencing.New(b, fencing.WithTracerProvider(tp)).Hold(context.Background(), key, time.Minute)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	t.Cleanup(func() { h.Release(context.Background()) })
	span := trace.SpanContextFromContext(h.Context())
	if !span.IsValid() {
		t.Fatal("the held lease's context carries no span")
	}
	return &Lease{Held: h, Tracer: tp.Tracer("service"), span: span, rec: rec}
}

// Child reports whether the last ended span called name is a child of the
// lease's span received from another process (a remote parent, in the
// lease's trace), and describes it; it fails t when there is no such span.
func (l *Lease) Child(t *testing.T, name string) (bool, string) {
	t.Helper()
	var s sdktrace.ReadOnlySpan
	for _, e := range l.rec.Ended() {
		if e.Name() == name {
			s = e
		}
	}
	if s == nil {
		t.Fatalf("no span %q was recorded", name)
	}
	child := s.Parent().IsRemote() && s.Parent().SpanID() == l.span.SpanID() && s.SpanContext().TraceID() == l.span.TraceID()
	return child, fmt.Sprintf("span %q: parent %v (remote %v), trace %v; the lease's span %v, trace %v",
		name, s.Parent().SpanID(), s.Parent().IsRemote(), s.SpanContext().TraceID(), l.span.SpanID(), l.span.TraceID())
}
