package httpguard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/httpguard"
)

// A service keeps totals in its own memory, so the middleware can admit the
// token and run the handler as one step. The holder's client sends the
// token of its context; a late holder gets 409 naming the fence.
func Example() {
	totals := map[string]string{}
	setTotal := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource, _, _ := guard.TokenFromContext(r.Context())
		body, _ := io.ReadAll(r.Body)
		totals[resource] = string(body) // under the resource's lock
	})
	srv := httptest.NewServer(httpguard.Middleware(setTotal, httpguard.WithWriter(guard.NewMemory())))
	defer srv.Close()
	client := &http.Client{Transport: httpguard.Transport(nil)}
	defer client.CloseIdleConnections()

	put := func(token uint64, total string) {
		// In a holder, ctx is held.Context(): it carries the lease's token.
		ctx := guard.ContextWithToken(context.Background(), "orders/42", token)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/total", strings.NewReader(total))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		fmt.Printf("token %d: %s", token, resp.Status)
		if err := httpguard.CheckResponse(resp); err != nil {
			fmt.Printf(" (%v)", err)
		}
		fmt.Println()
	}
	put(2, "200")
	put(1, "150") // the previous holder, late
	fmt.Println("total:", totals["orders/42"])
	// Output:
	// token 2: 200 OK
	// token 1: 409 Conflict (stale token: token 1 is below 2, the fence of resource "orders/42")
	// total: 200
}
