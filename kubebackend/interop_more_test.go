package kubebackend_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

func newLeaseID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// electorLeads starts a LeaderElector on name and waits until it leads.
func electorLeads(t *testing.T, client kubernetes.Interface, ns, name string) *elector {
	t.Helper()
	e := startElector(t, client, ns, name, true)
	select {
	case <-e.led:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector did not lead within 30s")
	}
	return e
}

// TestTokenWhileLeaderElectorLeads: once a LeaderElector has taken the
// Lease after a fencing lease, the Lease is live with token zero: the last
// fencing token, still stored on it, is not live, and CheckToken refuses it.
func TestTokenWhileLeaderElectorLeads(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(context.Background(), client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	const name = "interop-token-elector"
	req := backend.Request{Key: name, LeaseID: newLeaseID(t), Timeout: time.Minute, Margin: time.Second}
	l, err := b.Grant(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, name, req.LeaseID); err != nil {
		t.Fatal(err)
	}
	electorLeads(t, client, ns, name)
	tok, live, err := b.Token(ctx, name)
	if err != nil || !live || tok != 0 {
		t.Fatalf("Token while the elector leads = %d, %v, %v; want 0, live (the last fencing token was %d)", tok, live, err, l.Token)
	}
	st, err := b.Inspect(ctx, name)
	if err != nil || !st.Live || st.Token != 0 || st.MaxToken != l.Token {
		t.Fatalf("Inspect while the elector leads = %+v, %v; want live, token 0, highest %d", st, err, l.Token)
	}
}

// TestResentGrantAfterLeaderElector: a grant resent with the lease ID of a
// fencing lease that has ended, after a LeaderElector took the Lease (whose
// annotations still carry that lease ID's hash), is refused as held: the
// hash names the last fencing lease, not the Lease's holder.
func TestResentGrantAfterLeaderElector(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(context.Background(), client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	const name = "interop-resent-elector"
	req := backend.Request{Key: name, LeaseID: newLeaseID(t), Timeout: time.Minute, Margin: time.Second}
	if _, err := b.Grant(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, name, req.LeaseID); err != nil {
		t.Fatal(err)
	}
	electorLeads(t, client, ns, name)
	l, err := b.Grant(ctx, req)
	if !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("the resent grant while the elector leads = %+v, %v; want ErrLeaseHeld", l, err)
	}
}

// slowWrites delays the answer of every update (PUT) by d after the API
// server has sent it: a slow API server, or a slow network back.
type slowWrites struct {
	next http.RoundTripper
	d    time.Duration
}

func (s slowWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if r.Method == http.MethodPut {
		time.Sleep(s.d)
	}
	return resp, err
}

// TestGrantTimedFromSend: the grant's own write is timed from when it was
// sent, not from when its answer came back: with the answer 3s late, the
// lease (ttl + margin 1.5s) has ended by the time the grant returns, on the
// holder's clock and on the backend's, and Token no longer reports it live.
func TestGrantTimedFromSend(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, _ := srv.Namespace(t)
	const delay = 3 * time.Second
	cfg := srv.API.Config(true)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return slowWrites{next: rt, d: delay} }
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
	const name = "slow-grant"
	req := backend.Request{Key: name, LeaseID: newLeaseID(t), Timeout: time.Second, Margin: 500 * time.Millisecond}
	start := time.Now()
	l, err := b.Grant(ctx, req) // creates the Lease (a POST), then updates it (the PUT, answered late)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < delay {
		t.Fatalf("the grant returned after %v, before the %v delay of its answer", took, delay)
	}
	tok, live, err := b.Token(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if live {
		t.Fatalf("Token %v after a grant sent at most %v ago whose ttl + margin is %v: %d, live; want not live (the write was timed from its answer)", time.Since(start), time.Since(start), req.Timeout+req.Margin, tok)
	}
	t.Logf("grant (token %d) took %v; its lease ended before it returned", l.Token, took)
}

// TestLeaseDurationRoundedUp: leaseDurationSeconds is the fencing lease's
// ttl + margin rounded up to whole seconds, so a LeaderElector that times
// a fencing lease (1.9s here, written as 2) by it never takes the Lease
// before the fencing lease ends.
func TestLeaseDurationRoundedUp(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(context.Background(), client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	const name = "interop-rounding"
	req := backend.Request{Key: name, LeaseID: newLeaseID(t), Timeout: time.Minute, Margin: time.Second}
	if _, err := b.Grant(ctx, req); err != nil {
		t.Fatal(err)
	}
	e := startElector(t, client, ns, name, true)
	time.Sleep(time.Second) // the elector has seen the minute-long lease
	req.Timeout, req.Margin = time.Second, 900*time.Millisecond
	sent := time.Now()
	if _, err := b.Renew(ctx, req); err != nil { // the last renewal: then the holder is gone
		t.Fatal(err)
	}
	select {
	case <-e.led:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector did not lead within 30s of the last renewal")
	}
	started, _ := e.times()
	if got := started.Sub(sent); got < req.Timeout+req.Margin {
		t.Fatalf("the elector led %v after the last renewal was sent, before the lease's ttl + margin %v ended", got, req.Timeout+req.Margin)
	} else {
		t.Logf("the elector led %v after the last renewal (ttl + margin %v)", got, req.Timeout+req.Margin)
	}
}
