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
// context made from it; a context of the caller's own carries what
// ContextWithToken put in it, and guard reads the same key.
func TestContextToken(t *testing.T) {
	if _, _, ok := fencing.TokenFromContext(context.Background()); ok {
		t.Fatal("TokenFromContext(Background) reports a token")
	}
	ctx := fencing.ContextWithToken(context.Background(), "orders/42", 7)
	if r, tok, ok := guard.TokenFromContext(ctx); !ok || r != "orders/42" || tok != 7 {
		t.Fatalf("guard.TokenFromContext = %q, %d, %v; want orders/42, 7, true", r, tok, ok)
	}
	ctx = guard.ContextWithToken(ctx, "orders/43", 8) // one token per context: the newer wins
	if r, tok, ok := fencing.TokenFromContext(ctx); !ok || r != "orders/43" || tok != 8 {
		t.Fatalf("after a second ContextWithToken: %q, %d, %v; want orders/43, 8, true", r, tok, ok)
	}

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
		if r, tok, ok := fencing.TokenFromContext(ctx); !ok || r != "k" || tok != h.Token() || tok != 2 {
			t.Errorf("%s: TokenFromContext = %q, %d, %v; want k, %d, true", name, r, tok, ok, h.Token())
		}
		if v := ctx.Value(other{}); v != "kept" {
			t.Errorf("%s: the parent's value = %v, want kept", name, v)
		}
	}
}
