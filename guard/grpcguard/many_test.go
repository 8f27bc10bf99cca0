package grpcguard_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/grpcguard"
	"github.com/fencing-go/fencing/memorybackend"
)

// A HeldMany's context sends every key's token, through a real gRPC
// server, unary and streaming: under WithWriter both are admitted with the
// handler as one step, and a stale one of the two refuses the call
// (FailedPrecondition naming its fence), so the handler's write does not
// land and neither fence rises.
func TestHeldManyTokens(t *testing.T) {
	ctx := context.Background()
	m, err := fencing.New(memorybackend.New()).HoldMany(ctx, []string{"orders/b", "orders/a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	leases := m.Leases()
	tb, ta := leases[0].Token, leases[1].Token
	want := []guard.Token{{Resource: "orders/a", Value: ta}, {Resource: "orders/b", Value: tb}}

	for name, call := range map[string]func(*grpc.ClientConn, context.Context, string) error{
		"unary":  func(c *grpc.ClientConn, ctx context.Context, v string) error { return set(ctx, c, v) },
		"stream": func(c *grpc.ClientConn, ctx context.Context, v string) error { return sets(ctx, c, v) },
	} {
		s := newStore(false)
		conn := serve(t, s, grpcguard.WithWriter(s.g))
		if err := call(conn, m.Context(), "both"); err != nil || !reflect.DeepEqual(s.tokens, want) || s.values[""] != "both" {
			t.Fatalf("%s: HeldMany.Context: %v, handler saw %v, values %v; want nil and %v", name, err, s.tokens, s.values, want)
		}
		if s.g.Fence("orders/a") != ta || s.g.Fence("orders/b") != tb {
			t.Fatalf("%s: fences %d, %d; want %d, %d", name, s.g.Fence("orders/a"), s.g.Fence("orders/b"), ta, tb)
		}
		// A newer holder of orders/b wrote; the old pair, even with a
		// newer token for orders/a, is refused as a whole.
		if err := s.g.Admit(ctx, "orders/b", tb+5); err != nil {
			t.Fatal(err)
		}
		for what, ctx := range map[string]context.Context{
			"HeldMany.Context": m.Context(),
			"a newer orders/a": guard.ContextWithTokens(ctx, guard.Token{Resource: "orders/a", Value: ta + 1}, guard.Token{Resource: "orders/b", Value: tb}),
		} {
			err := call(conn, ctx, "stale")
			var stale *guard.StaleTokenError
			if status.Code(err) != codes.FailedPrecondition || !errors.As(err, &stale) ||
				stale.Resource != "orders/b" || stale.Token != tb || stale.Fence != tb+5 {
				t.Fatalf("%s: %s with a stale orders/b: %v; want FailedPrecondition refusing %d below %d", name, what, err, tb, tb+5)
			}
		}
		if s.calls != 1 || s.values[""] != "both" || s.g.Fence("orders/a") != ta || s.g.Fence("orders/b") != tb+5 {
			t.Fatalf("%s: after stale calls: %d handler calls, values %v, fences %d, %d; want 1, both, %d, %d",
				name, s.calls, s.values, s.g.Fence("orders/a"), s.g.Fence("orders/b"), ta, tb+5)
		}
	}
}

// inspector is a lock store that counts its reads and reports every key
// minted up to 1<<62.
type inspector struct{ reads atomic.Int64 }

func (i *inspector) Inspect(context.Context, string) (backend.KeyState, error) {
	i.reads.Add(1)
	return backend.KeyState{MaxToken: 1 << 62}, nil
}

// A call may carry guard.MaxTokensPerRequest tokens, as many as one
// HeldMany holds; one more is refused with InvalidArgument saying the
// limit, unary and streaming, before the mint check reads the lock store,
// and nothing is written.
func TestTooManyTokens(t *testing.T) {
	toks := make([]guard.Token, guard.MaxTokensPerRequest+1)
	for i := range toks {
		toks[i] = guard.Token{Resource: fmt.Sprintf("r%03d", i), Value: uint64(i + 1)}
	}
	limit := fmt.Sprintf("at most %d", guard.MaxTokensPerRequest)
	for name, call := range map[string]func(*grpc.ClientConn, context.Context) error{
		"unary":  func(c *grpc.ClientConn, ctx context.Context) error { return set(ctx, c, "v") },
		"stream": func(c *grpc.ClientConn, ctx context.Context) error { return sets(ctx, c, "v") },
	} {
		var insp inspector
		s := newStore(false)
		conn := serve(t, s, grpcguard.WithMintCheck(guard.NewMintCheck(&insp)), grpcguard.WithWriter(s.g))
		if err := call(conn, guard.ContextWithTokens(context.Background(), toks[:guard.MaxTokensPerRequest]...)); err != nil {
			t.Fatalf("%s: %d tokens: %v", name, guard.MaxTokensPerRequest, err)
		}
		reads := insp.reads.Load()
		err := call(conn, guard.ContextWithTokens(context.Background(), toks...))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "malformed fencing-token metadata") || !strings.Contains(err.Error(), limit) {
			t.Fatalf("%s: %d tokens: %v; want InvalidArgument saying %q", name, len(toks), err, limit)
		}
		s.mu.Lock()
		calls := s.calls
		s.mu.Unlock()
		if f := s.g.Fence(toks[guard.MaxTokensPerRequest].Resource); calls != 1 || insp.reads.Load() != reads || f != 0 {
			t.Fatalf("%s: refused calls ran the handler (%d calls in all, want 1), read the lock store %d times, or raised a fence to %d",
				name, calls, insp.reads.Load()-reads, f)
		}
	}
}
