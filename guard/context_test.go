package guard_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/fencing-go/fencing/guard"
)

func TestAdmitContext(t *testing.T) {
	g := guard.NewMemory()
	if err := guard.AdmitContext(context.Background(), g); !errors.Is(err, guard.ErrNoToken) {
		t.Fatalf("AdmitContext with no token: got %v, want ErrNoToken", err)
	}
	if f := g.Fence("r"); f != 0 {
		t.Fatalf("fence after a refused AdmitContext: %d, want 0", f)
	}
	if err := guard.AdmitContext(guard.ContextWithToken(context.Background(), "r", 5), g); err != nil {
		t.Fatalf("AdmitContext(r, 5): %v", err)
	}
	if f := g.Fence("r"); f != 5 {
		t.Fatalf("fence after AdmitContext(r, 5): %d, want 5", f)
	}
	err := guard.AdmitContext(guard.ContextWithToken(context.Background(), "r", 4), g)
	var stale *guard.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, guard.ErrStaleToken) || stale.Fence != 5 || stale.Token != 4 || stale.Resource != "r" {
		t.Fatalf("AdmitContext(r, 4) after 5: got %v (%+v), want a *StaleTokenError naming fence 5", err, stale)
	}
	if err := guard.AdmitContext(guard.ContextWithToken(context.Background(), "r", 0), g); !errors.Is(err, guard.ErrInvalidToken) {
		t.Fatalf("AdmitContext with token 0: got %v, want ErrInvalidToken", err)
	}
}

// One token per context: a second ContextWithToken replaces the first, and
// a context nobody tagged carries none.
func TestContextWithTokenReplaces(t *testing.T) {
	if _, _, ok := guard.TokenFromContext(context.Background()); ok {
		t.Fatal("TokenFromContext(Background) reports a token")
	}
	ctx := guard.ContextWithToken(context.Background(), "orders/42", 7)
	ctx = guard.ContextWithToken(ctx, "orders/43", 8)
	if r, tok, ok := guard.TokenFromContext(ctx); !ok || r != "orders/43" || tok != 8 {
		t.Fatalf("after a second ContextWithToken: %q, %d, %v; want orders/43, 8, true", r, tok, ok)
	}
}

// A context with several tokens: TokensFromContext returns them sorted by
// resource (a resource given twice keeps its last), TokenFromContext finds
// none rather than one of them, ContextWithToken replaces them all, and
// AdmitContext admits each.
func TestContextWithTokens(t *testing.T) {
	ctx := guard.ContextWithTokens(context.Background(),
		guard.Token{Resource: "b", Value: 2}, guard.Token{Resource: "a", Value: 7}, guard.Token{Resource: "b", Value: 3})
	want := []guard.Token{{Resource: "a", Value: 7}, {Resource: "b", Value: 3}}
	if got := guard.TokensFromContext(ctx); !reflect.DeepEqual(got, want) {
		t.Fatalf("TokensFromContext = %v, want %v", got, want)
	}
	if r, tok, ok := guard.TokenFromContext(ctx); ok {
		t.Fatalf("TokenFromContext with two tokens = %q, %d, true; want false", r, tok)
	}
	one := guard.ContextWithToken(ctx, "c", 1)
	if got := guard.TokensFromContext(one); !reflect.DeepEqual(got, []guard.Token{{Resource: "c", Value: 1}}) {
		t.Fatalf("ContextWithToken over two: TokensFromContext = %v", got)
	}
	if r, tok, ok := guard.TokenFromContext(guard.ContextWithTokens(ctx, guard.Token{Resource: "d", Value: 4})); !ok || r != "d" || tok != 4 {
		t.Fatalf("ContextWithTokens of one: TokenFromContext = %q, %d, %v", r, tok, ok)
	}
	if got := guard.TokensFromContext(context.Background()); got != nil {
		t.Fatalf("TokensFromContext with none = %v, want nil", got)
	}
	g := guard.NewMemory()
	if err := guard.AdmitContext(ctx, g); err != nil || g.Fence("a") != 7 || g.Fence("b") != 3 {
		t.Fatalf("AdmitContext: %v, fences %d, %d; want nil, 7, 3", err, g.Fence("a"), g.Fence("b"))
	}
	stale := guard.ContextWithTokens(context.Background(), guard.Token{Resource: "a", Value: 8}, guard.Token{Resource: "b", Value: 1})
	if err := guard.AdmitContext(stale, g); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("AdmitContext with b stale: %v, want ErrStaleToken", err)
	}
}
