package httpguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/httpguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seen records what the handler found in its request's context.
type seen struct {
	calls    atomic.Int64
	resource atomic.Value
	token    atomic.Uint64
	hadToken atomic.Bool
}

func (s *seen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		res, tok, ok := guard.TokenFromContext(r.Context())
		s.resource.Store(res)
		s.token.Store(tok)
		s.hadToken.Store(ok)
		fmt.Fprint(w, "ok")
	})
}

// serve runs h on a real loopback HTTP server and returns a client whose
// transport sends the context's token.
func serve(t *testing.T, h http.Handler) (*httptest.Server, *http.Client) {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return srv, &http.Client{Transport: httpguard.Transport(tr)}
}

func get(t *testing.T, c *http.Client, ctx context.Context, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestCarry(t *testing.T) {
	var s seen
	srv, c := serve(t, httpguard.Middleware(s.handler()))
	for _, res := range []string{"orders/42", "a b\"c;%\x00\xff", "é", strings.Repeat("k", backend.MaxKeyLength)} {
		ctx := guard.ContextWithToken(context.Background(), res, 1<<63+5)
		resp, _ := get(t, c, ctx, srv.URL)
		if resp.StatusCode != http.StatusOK || !s.hadToken.Load() || s.resource.Load() != res || s.token.Load() != 1<<63+5 {
			t.Fatalf("resource %q: status %d, handler saw %q, %d, %v", res, resp.StatusCode, s.resource.Load(), s.token.Load(), s.hadToken.Load())
		}
	}
	// No token: the handler decides.
	resp, _ := get(t, c, context.Background(), srv.URL)
	if resp.StatusCode != http.StatusOK || s.hadToken.Load() {
		t.Fatalf("no token: status %d, handler saw a token: %v", resp.StatusCode, s.hadToken.Load())
	}
	// The header, byte for byte, as a non-Go client would send it.
	resp, _ = get(t, http.DefaultClient, context.Background(), srv.URL, "Fencing-Token", `42; resource="orders%2F42"`)
	if resp.StatusCode != http.StatusOK || s.resource.Load() != "orders/42" || s.token.Load() != 42 {
		t.Fatalf("hand-written header: status %d, handler saw %q, %d", resp.StatusCode, s.resource.Load(), s.token.Load())
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestMalformed(t *testing.T) {
	var s seen
	srv, _ := serve(t, httpguard.Middleware(s.handler()))
	for _, c := range []struct {
		hdr  []string
		body string
	}{
		{[]string{"Fencing-Token", "42"}, "no \"; resource=\" parameter"},
		{[]string{"Fencing-Token", `42; resource="a/b"`}, "byte 1 of the resource, '/', is neither"},
		// What is wrong, said plainly, not as a byte of the resource.
		{[]string{"Fencing-Token", `42; resource="orders"; x=1`}, `more than one parameter: only resource="..." may follow the number`},
		{[]string{"Fencing-Token", `42; x=1; resource="orders"`}, `more than one parameter`},
		{[]string{"Fencing-Token", `42; resource="a"b"`}, `"b\"" follows the resource's closing quote (a quote in a resource is written %22)`},
		{[]string{"Fencing-Token", `42; resource="a`}, "the resource has no closing quote"},
		{[]string{"Fencing-Token", `42; resource=a`}, "the resource is not quoted"},
		{[]string{"Fencing-Token", `0; resource="a"`}, "token 0"},
		{[]string{"Fencing-Token", `1; resource=""`}, "invalid key"},
		{[]string{"Fencing-Token", `x; resource="a"`}, "not a decimal number"},
		{[]string{"Fencing-Token", `1; resource="a"`, "Fencing-Token", `2; resource="a"`}, `one resource with two different tokens: 1 and 2 for resource "a"`},
		{[]string{"Fencing-Token", `1; resource="a"`, "Fencing-Token", `2; resource="b"`, "Fencing-Token", `x; resource="c"`}, "not a decimal number"},
	} {
		resp, body := get(t, http.DefaultClient, context.Background(), srv.URL, c.hdr...)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "malformed Fencing-Token header") || !strings.Contains(body, c.body) {
			t.Errorf("%q: status %d, body %q; want 400 with %q", c.hdr, resp.StatusCode, body, c.body)
		}
	}
	if n := s.calls.Load(); n != 0 {
		t.Errorf("the handler ran %d times for malformed headers", n)
	}
	http.DefaultClient.CloseIdleConnections()
}

// The transport sends no request for a token no guard would admit.
func TestTransportRefusesBadTokens(t *testing.T) {
	var s seen
	srv, c := serve(t, httpguard.Middleware(s.handler()))
	for _, tc := range []struct {
		resource string
		token    uint64
		want     error
	}{
		{"r", 0, guard.ErrInvalidToken},
		{"", 1, backend.ErrInvalidKey},
		{strings.Repeat("k", backend.MaxKeyLength+1), 1, backend.ErrInvalidKey},
	} {
		req, _ := http.NewRequestWithContext(guard.ContextWithToken(context.Background(), tc.resource, tc.token), http.MethodPost, srv.URL, strings.NewReader("body"))
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("token %d for %d-byte resource: got %v, want %v", tc.token, len(tc.resource), err, tc.want)
		}
	}
	if n := s.calls.Load(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

func TestRequireToken(t *testing.T) {
	var s seen
	srv, c := serve(t, httpguard.Middleware(s.handler(), httpguard.RequireToken()))
	resp, body := get(t, c, context.Background(), srv.URL)
	if resp.StatusCode != http.StatusPreconditionRequired || !strings.Contains(body, "no fencing token") || s.calls.Load() != 0 {
		t.Fatalf("no token: status %d, body %q, handler calls %d; want 428", resp.StatusCode, body, s.calls.Load())
	}
	resp, _ = get(t, c, guard.ContextWithToken(context.Background(), "r", 1), srv.URL)
	if resp.StatusCode != http.StatusOK || s.calls.Load() != 1 {
		t.Fatalf("with a token: status %d, handler calls %d", resp.StatusCode, s.calls.Load())
	}
}

// WithWriter admits the token and runs the handler under the resource's
// lock: a stale request gets 409 naming the fence and never runs, even one
// that arrives while the newer holder's handler is running.
func TestWithWriter(t *testing.T) {
	g := guard.NewMemory()
	var value atomic.Value
	inside, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, tok, _ := guard.TokenFromContext(r.Context())
		if r.URL.Query().Has("block") {
			close(inside)
			<-release
		}
		value.Store(fmt.Sprint(tok))
	})
	srv, c := serve(t, httpguard.Middleware(h, httpguard.WithWriter(g)))
	ctx := func(tok uint64) context.Context {
		return guard.ContextWithToken(context.Background(), "orders/42", tok)
	}

	if resp, _ := get(t, c, ctx(1), srv.URL); resp.StatusCode != http.StatusOK || value.Load() != "1" {
		t.Fatalf("token 1: status %d, value %v", resp.StatusCode, value.Load())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, _ := get(t, c, ctx(3), srv.URL+"?block"); resp.StatusCode != http.StatusOK {
			t.Errorf("token 3: status %d", resp.StatusCode)
		}
	}()
	<-inside // token 3's handler holds the lock; its fence is not up yet
	late := make(chan *http.Response, 1)
	go func() {
		resp, _ := get(t, c, ctx(2), srv.URL)
		late <- resp
	}()
	select {
	case resp := <-late:
		close(release) // let the server stop
		t.Fatalf("token 2 answered %d while token 3's handler was running", resp.StatusCode)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-done
	resp := <-late
	if resp.StatusCode != http.StatusConflict || value.Load() != "3" {
		t.Fatalf("token 2 after 3: status %d, value %v; want 409 and 3", resp.StatusCode, value.Load())
	}
	err := httpguard.CheckResponse(resp)
	var stale *guard.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, guard.ErrStaleToken) || stale.Fence != 3 || stale.Token != 2 || stale.Resource != "orders/42" {
		t.Fatalf("CheckResponse: %v (%+v), want fence 3 refusing token 2", err, stale)
	}
	resp, body := get(t, c, ctx(2), srv.URL)
	if resp.StatusCode != http.StatusConflict || resp.Header.Get(httpguard.FenceHeader) != `3; resource="orders%2F42"` ||
		!strings.Contains(body, `token 2 is below 3, the fence of resource "orders/42"`) {
		t.Fatalf("token 2 again: status %d, %s %q, body %q", resp.StatusCode, httpguard.FenceHeader, resp.Header.Get(httpguard.FenceHeader), body)
	}
	if resp, _ := get(t, c, context.Background(), srv.URL); resp.StatusCode != http.StatusPreconditionRequired {
		t.Fatalf("no token under WithWriter: status %d, want 428", resp.StatusCode)
	}
	if g.Fence("orders/42") != 3 || value.Load() != "3" {
		t.Fatalf("fence %d, value %v; want 3, 3", g.Fence("orders/42"), value.Load())
	}
}

func TestWriteStale(t *testing.T) {
	w := httptest.NewRecorder()
	if httpguard.WriteStale(w, "r", errors.New("other")) || w.Code != http.StatusOK {
		t.Fatalf("WriteStale(other error) wrote %d", w.Code)
	}
	w = httptest.NewRecorder()
	if !httpguard.WriteStale(w, "a/b", fmt.Errorf("wrapped: %w", guard.ErrStaleToken)) {
		t.Fatal("WriteStale(a stale error with no fence) wrote nothing")
	}
	resp := w.Result()
	if err := httpguard.CheckResponse(resp); !errors.Is(err, guard.ErrStaleToken) || w.Header().Get(httpguard.FenceHeader) != `0; resource="a%2Fb"` {
		t.Fatalf("no fence known: CheckResponse %v, %s %q", err, httpguard.FenceHeader, w.Header().Get(httpguard.FenceHeader))
	}
	if err := httpguard.CheckResponse(&http.Response{StatusCode: http.StatusConflict, Header: http.Header{}}); err != nil {
		t.Fatalf("CheckResponse(a 409 of another kind) = %v, want nil", err)
	}
}

// A Fencing-Token header the caller set is replaced by the context's, not
// sent beside it (two headers would be refused, or the wrong one read), and
// the caller's request is left as it was.
func TestTransportReplacesCallersHeader(t *testing.T) {
	var got atomic.Value
	srv, c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Values(httpguard.TokenHeader))
	}))
	ctx := guard.ContextWithToken(context.Background(), "orders/42", 9)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	own := `1; resource="orders%2F42"`
	req.Header.Set(httpguard.TokenHeader, own)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := httpguard.Format("orders/42", 9)
	if vs := got.Load().([]string); len(vs) != 1 || vs[0] != want {
		t.Fatalf("the server got %s %q, want only %q", httpguard.TokenHeader, vs, want)
	}
	if vs := req.Header.Values(httpguard.TokenHeader); len(vs) != 1 || vs[0] != own {
		t.Fatalf("the caller's request now has %q, want its own %q", vs, own)
	}
}

// CheckResponse reports the fence the response names, for the resource it
// names, and the request's token only when it was for that resource: a 409
// about another resource (one the service wrote on the caller's behalf)
// never reads as a fence of the request's own resource.
func TestCheckResponseNamesItsOwnResource(t *testing.T) {
	conflict := func(ctx context.Context, fence string) *http.Response {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.invalid", nil)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Response{StatusCode: http.StatusConflict, Header: http.Header{httpguard.FenceHeader: {fence}}, Request: req}
	}
	ctx := guard.ContextWithToken(context.Background(), "orders/42", 3)
	for _, c := range []struct {
		name  string
		fence string
		want  guard.StaleTokenError
	}{
		{"same resource", httpguard.Format("orders/42", 7), guard.StaleTokenError{Resource: "orders/42", Token: 3, Fence: 7}},
		{"another resource", httpguard.Format("orders/43", 7), guard.StaleTokenError{Resource: "orders/43", Token: 0, Fence: 7}},
	} {
		var stale *guard.StaleTokenError
		err := httpguard.CheckResponse(conflict(ctx, c.fence))
		if !errors.As(err, &stale) || *stale != c.want {
			t.Errorf("%s: CheckResponse = %v (%+v), want %+v", c.name, err, stale, c.want)
		}
	}
	// No token in the request's context: the fence alone.
	var stale *guard.StaleTokenError
	err := httpguard.CheckResponse(conflict(context.Background(), httpguard.Format("orders/42", 7)))
	if !errors.As(err, &stale) || *stale != (guard.StaleTokenError{Resource: "orders/42", Fence: 7}) {
		t.Errorf("no token: CheckResponse = %v (%+v)", err, stale)
	}
}
