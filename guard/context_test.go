package guard_test

import (
	"context"
	"errors"
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
