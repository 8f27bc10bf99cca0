package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// fencing.ContextWithToken replaces the token a context carries: one set
// by itself, and a held lease's, so that re-tagging h.Context() for another
// resource sends that resource and token, not the lease's.
func TestContextWithTokenReplaces(t *testing.T) {
	ctx := fencing.ContextWithToken(context.Background(), "orders/42", 7)
	ctx = fencing.ContextWithToken(ctx, "orders/43", 8)
	if r, tok, ok := fencing.TokenFromContext(ctx); !ok || r != "orders/43" || tok != 8 {
		t.Fatalf("after a second ContextWithToken: %q, %d, %v; want orders/43, 8, true", r, tok, ok)
	}

	mem := memorybackend.New()
	defer mem.Close()
	h, err := fencing.New(mem).Hold(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	retagged := fencing.ContextWithToken(h.Context(), "other", h.Token()+100)
	if r, tok, ok := fencing.TokenFromContext(retagged); !ok || r != "other" || tok != h.Token()+100 {
		t.Fatalf("Held.Context re-tagged: TokenFromContext = %q, %d, %v; want other, %d, true", r, tok, ok, h.Token()+100)
	}
	if r, tok, _ := fencing.TokenFromContext(h.Context()); r != "k" || tok != h.Token() {
		t.Fatalf("Held.Context after re-tagging a child: %q, %d; want k, %d", r, tok, h.Token())
	}
}
