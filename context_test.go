package fencing_test

import (
	"context"
	"reflect"
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

// A HeldMany's context carries every key's token, sorted by key, and so
// does a context made from it (guard.TokensFromContext); guard's
// one-token reader finds none there, not one of the two. Re-tagging a
// child replaces them in the child only.
func TestHeldManyContextTokens(t *testing.T) {
	ctx := context.Background()
	mem := memorybackend.New()
	defer mem.Close()
	c := fencing.New(mem)
	if _, err := c.Grant(ctx, "k1", time.Second); err != nil {
		t.Fatal(err) // token 1, so the held lease's is 2
	}
	if _, err := mem.ForceRelease(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	m, err := c.HoldMany(guard.ContextWithToken(ctx, "orders/43", 8), []string{"k2", "k1"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	leases := m.Leases()
	want := []guard.Token{{Resource: "k1", Value: leases[1].Token}, {Resource: "k2", Value: leases[0].Token}}
	if want[0].Value != 2 || want[1].Value != 1 {
		t.Fatalf("leases %+v: want k1's token 2 and k2's 1", leases)
	}
	child, cancel := context.WithTimeout(m.Context(), time.Minute)
	defer cancel()
	for name, ctx := range map[string]context.Context{"HeldMany.Context": m.Context(), "its child": child} {
		if got := guard.TokensFromContext(ctx); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: TokensFromContext = %v, want %v", name, got, want)
		}
		if r, tok, ok := guard.TokenFromContext(ctx); ok {
			t.Errorf("%s: TokenFromContext = %q, %d, true; want false for two tokens", name, r, tok)
		}
	}
	retagged := guard.ContextWithToken(m.Context(), "other", 9)
	if got := guard.TokensFromContext(retagged); !reflect.DeepEqual(got, []guard.Token{{Resource: "other", Value: 9}}) {
		t.Fatalf("re-tagged child: TokensFromContext = %v", got)
	}
	if got := guard.TokensFromContext(m.Context()); !reflect.DeepEqual(got, want) {
		t.Fatalf("HeldMany.Context after re-tagging a child: %v, want %v", got, want)
	}
}
