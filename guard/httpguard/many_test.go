package httpguard_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/httpguard"
	"github.com/fencing-go/fencing/memorybackend"
)

// A HeldMany's context sends every key's token, through a real HTTP
// server: under WithWriter both are admitted with the handler as one step,
// and a stale one of the two refuses the request (409 naming its fence),
// so the handler's write does not land and neither fence rises.
func TestHeldManyTokens(t *testing.T) {
	ctx := context.Background()
	coord := fencing.New(memorybackend.New())
	m, err := coord.HoldMany(ctx, []string{"orders/b", "orders/a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	leases := m.Leases()
	tb, ta := leases[0].Token, leases[1].Token

	g := guard.NewMemory()
	var mu sync.Mutex
	var got []guard.Token
	calls := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		got = guard.TokensFromContext(r.Context())
	})
	srv, c := serve(t, httpguard.Middleware(h, httpguard.WithWriter(g)))

	resp, body := get(t, c, m.Context(), srv.URL)
	want := []guard.Token{{Resource: "orders/a", Value: ta}, {Resource: "orders/b", Value: tb}}
	if resp.StatusCode != http.StatusOK || !reflect.DeepEqual(got, want) {
		t.Fatalf("HeldMany.Context: status %d %q, handler saw %v; want 200 and %v", resp.StatusCode, body, got, want)
	}
	if g.Fence("orders/a") != ta || g.Fence("orders/b") != tb {
		t.Fatalf("fences %d, %d; want %d, %d", g.Fence("orders/a"), g.Fence("orders/b"), ta, tb)
	}

	// A newer holder of orders/b wrote; the old pair, even with a newer
	// token for orders/a, is refused as a whole.
	if err := g.Admit(ctx, "orders/b", tb+5); err != nil {
		t.Fatal(err)
	}
	for name, ctx := range map[string]context.Context{
		"HeldMany.Context": m.Context(),
		"a newer orders/a": guard.ContextWithTokens(ctx, guard.Token{Resource: "orders/a", Value: ta + 1}, guard.Token{Resource: "orders/b", Value: tb}),
	} {
		resp, body := get(t, c, ctx, srv.URL)
		var stale *guard.StaleTokenError
		if err := httpguard.CheckResponse(resp); resp.StatusCode != http.StatusConflict || !errors.As(err, &stale) ||
			stale.Resource != "orders/b" || stale.Token != tb || stale.Fence != tb+5 {
			t.Fatalf("%s with a stale orders/b: status %d %q, CheckResponse %v; want 409 refusing %d below %d", name, resp.StatusCode, body, err, tb, tb+5)
		}
	}
	if calls != 1 || g.Fence("orders/a") != ta || g.Fence("orders/b") != tb+5 {
		t.Fatalf("after stale requests: %d handler calls, fences %d, %d; want 1, %d, %d", calls, g.Fence("orders/a"), g.Fence("orders/b"), ta, tb+5)
	}
}
