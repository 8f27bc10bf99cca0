package kubebackend_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

func newBackend(t *testing.T) (*kubebackend.Backend, kubernetes.Interface, string) {
	t.Helper()
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(context.Background(), client, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, client, ns
}

// TestTokensIncreaseAcrossDeleteAndRecreate: an operator who deletes a
// key's Lease (and one who creates it again by hand, empty) cannot make a
// token go down or come back.
func TestTokensIncreaseAcrossDeleteAndRecreate(t *testing.T) {
	b, client, _ := newBackend(t)
	c := fencing.New(b)
	ctx := context.Background()
	const key = "deleted-by-an-operator"
	leases := client.CoordinationV1().Leases(mustNS(t, b))
	var prev uint64
	for round := range 4 {
		l, err := c.Grant(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("round %d: Grant: %v", round, err)
		}
		if l.Token <= prev {
			t.Fatalf("round %d: token %d after %d", round, l.Token, prev)
		}
		prev = l.Token
		// The operator deletes the Lease under the live lease.
		if err := leases.Delete(ctx, kubebackend.LeaseName(key), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if ok, err := c.CheckToken(ctx, key, l.Token); err != nil || ok {
			t.Fatalf("CheckToken after the Lease was deleted = %v, %v; want false", ok, err)
		}
		if _, err := c.Renew(ctx, key, l.ID, time.Minute); !errors.Is(err, fencing.ErrLeaseNotFound) {
			t.Fatalf("Renew after the Lease was deleted: %v, want ErrLeaseNotFound", err)
		}
	}
}

// mustNS returns the namespace of b (kept by the test helpers).
func mustNS(t *testing.T, b *kubebackend.Backend) string {
	t.Helper()
	return b.Namespace()
}

// TestOddKeys: keys that are not object names (capitals, slashes, bytes,
// 1024 bytes, the hashed prefix itself) map to distinct valid Leases, and
// kubectl-style names are used as they are.
func TestOddKeys(t *testing.T) {
	b, client, ns := newBackend(t)
	c := fencing.New(b)
	ctx := context.Background()
	keys := []string{"plain-name", "Capital", "a/b", "a_b", "\x00\xff", strings.Repeat("k", 1024),
		"fencing.h.abc", "fencing.h." + strings.Repeat("0", 64), "dotted.name.x", "-leading", "ünïcode"}
	tokens := map[string]uint64{}
	for _, k := range keys {
		l, err := c.Grant(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("Grant(%q): %v", k, err)
		}
		tokens[k] = l.Token
	}
	for _, k := range keys {
		tok, live, err := c.Token(ctx, k)
		if err != nil || !live || tok != tokens[k] {
			t.Fatalf("Token(%q) = %d, %v, %v; want %d, live", k, tok, live, err, tokens[k])
		}
	}
	if _, err := client.CoordinationV1().Leases(ns).Get(ctx, "plain-name", metav1.GetOptions{}); err != nil {
		t.Fatalf("the Lease of key plain-name is not named plain-name: %v", err)
	}
	if name := kubebackend.LeaseName("fencing.h." + strings.Repeat("0", 64)); name == "fencing.h."+strings.Repeat("0", 64) {
		t.Fatal("a key shaped like a hashed name is used verbatim")
	}
	page, _, err := c.List(ctx, "", "", 100)
	if err != nil || len(page) != len(keys) {
		t.Fatalf("List = %d keys, %v; want %d", len(page), err, len(keys))
	}
}

// TestLostReplyIsOutcomeUnknown: an update whose reply the network lost
// (the fault proxy drops every reply once the update is on its way) is
// ErrOutcomeUnknown, and the resend with the same lease ID settles it.
func TestLostReplyIsOutcomeUnknown(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, _ := srv.Namespace(t)
	u, _ := url.Parse(srv.API.URL)
	proxy := faultproxy.Start(t, u.Host, faultproxy.Hooks{})
	cfg := srv.API.Config(true)
	cfg.Host = "https://" + proxy.Addr()
	cfg.Timeout = 0
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut && dropping.Load() {
				proxy.SetMode(faultproxy.DropReplies) // the update goes out; its reply is lost
			}
			return rt.RoundTrip(r)
		})
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := kubebackend.New(context.Background(), client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	req := backend.Request{Key: "lost-reply", LeaseID: "lease-with-a-lost-reply", Timeout: time.Minute, Margin: time.Second}
	// Create the key's Lease first, so the grant is one read and one update.
	other := backend.Request{Key: req.Key, LeaseID: "an-earlier-lease", Timeout: time.Minute, Margin: time.Second}
	if _, err := b.Grant(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, other.Key, other.LeaseID); err != nil {
		t.Fatal(err)
	}
	dropping.Store(true)
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = b.Grant(gctx, req)
	cancel()
	dropping.Store(false)
	if !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant whose reply was lost: %v, want ErrOutcomeUnknown", err)
	}
	proxy.SetMode(faultproxy.Forward)
	proxy.Reset()
	// The resend settles it: the lease the lost update granted, or a new
	// one if the update never applied; either way the key's live token.
	var lease backend.Lease
	for end := time.Now().Add(time.Minute); ; {
		lease, err = b.Grant(ctx, req)
		if err == nil || time.Now().After(end) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the dropped connection may take a moment to go
	}
	if err != nil {
		t.Fatalf("resent Grant: %v", err)
	}
	tok, live, err := b.Token(ctx, req.Key)
	if err != nil || !live || tok != lease.Token {
		t.Fatalf("Token = %d, %v, %v; want the resent grant's %d, live", tok, live, err, lease.Token)
	}
	if _, err := b.Grant(ctx, backend.Request{Key: req.Key, LeaseID: "someone-else", Timeout: time.Minute}); !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("another grant after the settled one: %v, want ErrLeaseHeld", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
