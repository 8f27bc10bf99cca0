package grpcguard_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/fencing-go/fencing/guard/grpcguard"
	"github.com/fencing-go/fencing/internal/testing/spantest"
)

// TestTraceContext: a call made under a held lease's context, unary or
// streaming, with WithPropagator at both ends, reaches the handler with
// the lease's span as its remote parent, in the lease's trace, along with
// the token; with the option at one end only, the handler's span starts a
// trace of its own.
func TestTraceContext(t *testing.T) {
	lease := spantest.Hold(t, "orders/42")
	prop := grpcguard.WithPropagator(propagation.TraceContext{})
	for _, c := range []struct {
		name   string
		client []grpcguard.ClientOption
		server []grpcguard.Option
		want   bool
	}{
		{"both ends", []grpcguard.ClientOption{prop}, []grpcguard.Option{prop}, true},
		{"client only", []grpcguard.ClientOption{prop}, nil, false},
		{"server only", nil, []grpcguard.Option{prop}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(false)
			s.tracer = lease.Tracer
			conn := dial(t, serve(t, s, c.server...).Target(), c.client...)
			for name, call := range map[string]func(context.Context) error{
				"unary":  func(ctx context.Context) error { return set(ctx, conn, "v") },
				"stream": func(ctx context.Context) error { return sets(ctx, conn, "v") },
			} {
				if err := call(lease.Held.Context()); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				s.mu.Lock()
				token := s.token
				s.mu.Unlock()
				if want := lease.Held.Lease().Token; token != want {
					t.Fatalf("%s: the handler saw token %d, want the lease's %d", name, token, want)
				}
				if child, what := lease.Child(t, "write"); child != c.want {
					t.Fatalf("%s: %s: a child of the lease's %v, want %v", name, what, child, c.want)
				}
			}
		})
	}
}
