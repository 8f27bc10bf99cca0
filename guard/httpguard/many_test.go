package httpguard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
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

// inspector is a lock store that counts its reads and reports every key
// minted up to 1<<62.
type inspector struct{ reads atomic.Int64 }

func (i *inspector) Inspect(context.Context, string) (backend.KeyState, error) {
	i.reads.Add(1)
	return backend.KeyState{MaxToken: 1 << 62}, nil
}

// manyTokens returns n tokens for n resources, r000=1, r001=2, ...
func manyTokens(n int) []guard.Token {
	toks := make([]guard.Token, n)
	for i := range toks {
		toks[i] = guard.Token{Resource: fmt.Sprintf("r%03d", i), Value: uint64(i + 1)}
	}
	return toks
}

// A request may carry guard.MaxTokensPerRequest tokens, as many as one
// HeldMany holds; one more, on as many lines or folded into one, is
// refused with 400 saying the limit, before the mint check reads the lock
// store, and nothing is written.
func TestTooManyTokens(t *testing.T) {
	var calls atomic.Int64
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) })
	newServer := func() (*httptest.Server, *http.Client, *guard.Memory, *inspector) {
		var insp inspector
		g := guard.NewMemory()
		srv, c := serve(t, httpguard.Middleware(h, httpguard.WithMintCheck(guard.NewMintCheck(&insp)), httpguard.WithWriter(g)))
		return srv, c, g, &insp
	}
	ctx := context.Background()
	toks := manyTokens(guard.MaxTokensPerRequest + 1)

	srv, c, g, _ := newServer()
	resp, body := get(t, c, guard.ContextWithTokens(ctx, toks[:guard.MaxTokensPerRequest]...), srv.URL)
	if resp.StatusCode != http.StatusOK || calls.Load() != 1 || g.Fence(toks[0].Resource) != toks[0].Value {
		t.Fatalf("%d tokens: status %d %q, %d handler calls, fence %d; want 200, 1 call, fence %d",
			guard.MaxTokensPerRequest, resp.StatusCode, body, calls.Load(), g.Fence(toks[0].Resource), toks[0].Value)
	}

	srv, c, g, insp := newServer()
	var lines, folded []string
	for _, tok := range toks {
		lines = append(lines, httpguard.TokenHeader, httpguard.Format(tok.Resource, tok.Value))
		folded = append(folded, httpguard.Format(tok.Resource, tok.Value))
	}
	limit := fmt.Sprintf("at most %d", guard.MaxTokensPerRequest)
	for name, hdr := range map[string][]string{
		"lines":  lines,
		"folded": {httpguard.TokenHeader, strings.Join(folded, ", ")},
	} {
		resp, body := get(t, http.DefaultClient, ctx, srv.URL, hdr...)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "malformed Fencing-Token header") || !strings.Contains(body, limit) {
			t.Errorf("%d tokens on %s: status %d %q; want 400 saying %q", len(toks), name, resp.StatusCode, body, limit)
		}
	}
	// Through the Transport too: the server refuses what it sends.
	resp, body = get(t, c, guard.ContextWithTokens(ctx, toks...), srv.URL)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, limit) {
		t.Errorf("%d tokens through Transport: status %d %q; want 400 saying %q", len(toks), resp.StatusCode, body, limit)
	}
	for _, tok := range toks {
		if f := g.Fence(tok.Resource); f != 0 {
			t.Fatalf("after refused requests, the fence of %q is %d, want none", tok.Resource, f)
		}
	}
	if n, r := calls.Load(), insp.reads.Load(); n != 1 || r != 0 {
		t.Fatalf("refused requests ran the handler (%d calls, want 1 in all) or read the lock store %d times, want 0", n, r)
	}
	http.DefaultClient.CloseIdleConnections()
}

// A proxy may fold several Fencing-Token lines into one, joined by commas
// (RFC 9110, section 5.3): each element, between optional whitespace, is
// one value, so the folded line is the lines it came from. No value holds
// a comma (a resource's is %2C), so none is split in two. An empty element
// is malformed, as an empty line is.
func TestFoldedHeader(t *testing.T) {
	var mu sync.Mutex
	var got []guard.Token
	calls := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		got = guard.TokensFromContext(r.Context())
	})
	srv, _ := serve(t, httpguard.Middleware(h))
	ctx := context.Background()
	want := []guard.Token{{Resource: "a,b", Value: 1}, {Resource: "c", Value: 2}, {Resource: "d", Value: 3}}
	for _, hdr := range [][]string{
		{"Fencing-Token", `1; resource="a%2Cb", 2; resource="c",3; resource="d"`},
		{"Fencing-Token", "1; resource=\"a%2cb\"\t,\t2; resource=\"c\"", "Fencing-Token", `3; resource="d"`},
		{"Fencing-Token", `3; resource="d", 1; resource="a%2Cb"`, "Fencing-Token", `2; resource="c", 1; resource="a%2Cb"`},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		resp, body := get(t, http.DefaultClient, ctx, srv.URL, hdr...)
		mu.Lock()
		if resp.StatusCode != http.StatusOK || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: status %d %q, handler saw %v; want 200 and %v", hdr, resp.StatusCode, body, got, want)
		}
		mu.Unlock()
	}
	mu.Lock()
	n := calls
	mu.Unlock()
	for _, c := range []struct {
		hdr  string
		body string
	}{
		{`1; resource="a", 2; resource="a"`, `one resource with two different tokens: 1 and 2 for resource "a"`},
		{`1; resource="a", 2; resource="b",`, "an empty element"},
		{`1; resource="a",, 2; resource="b"`, "an empty element"},
		{`, 1; resource="a"`, "an empty element"},
		{`1; resource="a,b"`, "no closing quote (a line is split at its commas, one value each: a comma in a resource is written %2C)"},
		{`1,2; resource="a"`, `"1" has no "; resource=" parameter`},
		{`1; resource="a", x; resource="b"`, "not a decimal number"},
	} {
		resp, body := get(t, http.DefaultClient, ctx, srv.URL, "Fencing-Token", c.hdr)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "malformed Fencing-Token header") || !strings.Contains(body, c.body) {
			t.Errorf("%q: status %d, body %q; want 400 with %q", c.hdr, resp.StatusCode, body, c.body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != n {
		t.Errorf("the handler ran %d times for malformed headers", calls-n)
	}
	http.DefaultClient.CloseIdleConnections()
}

// The Transport sends one line per token, with no comma to split, and
// replaces a folded line the caller set.
func TestTransportReplacesFoldedHeader(t *testing.T) {
	var got atomic.Value
	srv, c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Values(httpguard.TokenHeader))
	}))
	ctx := guard.ContextWithTokens(context.Background(), guard.Token{Resource: "a,b", Value: 9}, guard.Token{Resource: "c", Value: 3})
	resp, _ := get(t, c, ctx, srv.URL, httpguard.TokenHeader, `1; resource="a%2Cb", 1; resource="c"`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []string{`9; resource="a%2Cb"`, `3; resource="c"`}
	if vs := got.Load().([]string); !reflect.DeepEqual(vs, want) {
		t.Fatalf("the server got %s %q, want %q", httpguard.TokenHeader, vs, want)
	}
}
