package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// A held lease's context carries its key and token, and so does every
// context made from it, replacing one its parent carried; guard reads them
// (guard.TokenFromContext). Re-tagging a child for another resource leaves
// the held lease's context as it was.
func TestContextToken(t *testing.T) {
	ctx := guard.ContextWithToken(context.Background(), "orders/43", 8)

	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	if _, err := c.Grant(context.Background(), "k", time.Second); err != nil {
		t.Fatal(err) // token 1, so the held lease's is 2
	}
	if _, err := mem.ForceRelease(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	type other struct{}
	parent := context.WithValue(ctx, other{}, "kept")
	h, err := c.Hold(parent, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	child, cancel := context.WithTimeout(h.Context(), time.Minute)
	defer cancel()
	for name, ctx := range map[string]context.Context{"Held.Context": h.Context(), "its child": child} {
		if r, tok, ok := guard.TokenFromContext(ctx); !ok || r != "k" || tok != h.Token() || tok != 2 {
			t.Errorf("%s: TokenFromContext = %q, %d, %v; want k, %d, true", name, r, tok, ok, h.Token())
		}
		if v := ctx.Value(other{}); v != "kept" {
			t.Errorf("%s: the parent's value = %v, want kept", name, v)
		}
	}
	retagged := guard.ContextWithToken(h.Context(), "other", h.Token()+100)
	if r, tok, ok := guard.TokenFromContext(retagged); !ok || r != "other" || tok != h.Token()+100 {
		t.Fatalf("Held.Context re-tagged: TokenFromContext = %q, %d, %v; want other, %d, true", r, tok, ok, h.Token()+100)
	}
	if r, tok, _ := guard.TokenFromContext(h.Context()); r != "k" || tok != h.Token() {
		t.Fatalf("Held.Context after re-tagging a child: %q, %d; want k, %d", r, tok, h.Token())
	}
}
