package httpguard_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/httpguard"
	"github.com/fencing-go/fencing/internal/testing/spantest"
)

// TestTraceContext: a request made under a held lease's context, with
// WithPropagator at both ends, reaches the handler with the lease's span
// as its remote parent, in the lease's trace, along with the token; with
// the option at one end only, the handler's span starts a trace of its own.
func TestTraceContext(t *testing.T) {
	lease := spantest.Hold(t, "orders/42")
	prop := httpguard.WithPropagator(propagation.TraceContext{})
	for _, c := range []struct {
		name   string
		client []httpguard.TransportOption
		server []httpguard.Option
		want   bool
	}{
		{"both ends", []httpguard.TransportOption{prop}, []httpguard.Option{prop}, true},
		{"client only", []httpguard.TransportOption{prop}, nil, false},
		{"server only", nil, []httpguard.Option{prop}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var token atomic.Uint64
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, tok, _ := guard.TokenFromContext(r.Context())
				token.Store(tok)
				_, span := lease.Tracer.Start(r.Context(), "write")
				span.End()
			})
			srv := httptest.NewServer(httpguard.Middleware(handler, c.server...))
			defer srv.Close()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, _ := get(t, &http.Client{Transport: httpguard.Transport(tr, c.client...)}, lease.Held.Context(), srv.URL)
			if want := lease.Held.Lease().Token; resp.StatusCode != http.StatusOK || token.Load() != want {
				t.Fatalf("status %d, token %d; want 200 and the lease's token %d", resp.StatusCode, token.Load(), want)
			}
			if child, what := lease.Child(t, "write"); child != c.want {
				t.Fatalf("%s: a child of the lease's %v, want %v", what, child, c.want)
			}
		})
	}
}
