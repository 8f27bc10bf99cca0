package etcdbackend_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// runID keeps the keys of one test run apart from earlier runs' on a server
// given by ETCD_ENDPOINTS.
var (
	runID    = strconv.FormatInt(time.Now().UnixNano(), 36)
	prefixes atomic.Int64
)

// newPrefix returns a prefix no other backend of any run uses.
func newPrefix(what string) string {
	return fmt.Sprintf("fencing-test/%s/%s/%d/", runID, what, prefixes.Add(1))
}

// newBackend returns a backend on a prefix of its own, closed in cleanup,
// and the prefix.
func newBackend(t testing.TB, cli *clientv3.Client) (*etcdbackend.Backend, string) {
	t.Helper()
	prefix := newPrefix("test")
	b, err := newWithPrefix(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, prefix
}

func newWithPrefix(cli *clientv3.Client, prefix string) (*etcdbackend.Backend, error) {
	return etcdbackend.New(context.Background(), cli, etcdbackend.WithPrefix(prefix))
}

func req(key, id string, timeout time.Duration) backend.Request {
	return backend.Request{Key: key, LeaseID: id, Timeout: timeout, Margin: time.Second}
}

func mustGrant(t testing.TB, b backend.Backend, r backend.Request) backend.Lease {
	t.Helper()
	l, err := b.Grant(context.Background(), r)
	if err != nil {
		t.Fatalf("Grant(%q, %q): %v", r.Key, r.LeaseID, err)
	}
	return l
}

func wantToken(t testing.TB, b backend.Backend, key string, token uint64, live bool) {
	t.Helper()
	got, gotLive, err := b.Token(context.Background(), key)
	if err != nil {
		t.Fatalf("Token(%q): %v", key, err)
	}
	if got != token || gotLive != live {
		t.Fatalf("Token(%q) = %d, %v; want %d, %v", key, got, gotLive, token, live)
	}
}

func leaseCount(t testing.TB, cli *clientv3.Client) int {
	t.Helper()
	resp, err := cli.Leases(context.Background())
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	return len(resp.Leases)
}

func TestNew(t *testing.T) {
	if _, err := etcdbackend.New(context.Background(), nil); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("New(nil) = %v, want ErrInvalidConfig", err)
	}
	cli := etcdtest.Client(t)
	if _, err := etcdbackend.New(context.Background(), cli, etcdbackend.WithSafetyCheck(42)); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("New(WithSafetyCheck(42)) = %v, want ErrInvalidConfig", err)
	}
}

// TestTTLRounding: etcd grants whole seconds, so the backend asks for
// ceil(timeout + margin) and reports what it got, minus the margin.
func TestTTLRounding(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	for i, c := range []struct {
		timeout, margin time.Duration
		wantTTL         time.Duration
	}{
		{time.Millisecond, 0, time.Second}, // raised to etcd's minimum
		{1500 * time.Millisecond, 200 * time.Millisecond, 2*time.Second - 200*time.Millisecond},
		{3 * time.Second, time.Second, 3 * time.Second},
		{3*time.Second + 1, time.Second, 4 * time.Second},
	} {
		key := fmt.Sprint("ttl", i)
		before := time.Now()
		l, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: "id", Timeout: c.timeout, Margin: c.margin})
		if err != nil {
			t.Fatal(err)
		}
		if l.TTL != c.wantTTL || l.Margin != c.margin || l.TTL < c.timeout {
			t.Errorf("timeout %v margin %v: TTL %v margin %v, want TTL %v", c.timeout, c.margin, l.TTL, l.Margin, c.wantTTL)
		}
		if l.ExpiresAt.Before(before.Add(l.TTL+l.Margin)) || l.ExpiresAt.After(time.Now().Add(l.TTL+l.Margin)) {
			t.Errorf("ExpiresAt %v is not send time + granted TTL", l.ExpiresAt)
		}
		resp, err := cli.TimeToLive(ctx, leaseOf(t, cli, prefix, key))
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Duration(resp.GrantedTTL) * time.Second; got != l.TTL+l.Margin {
			t.Errorf("etcd lease granted %v, backend reports TTL+margin %v", got, l.TTL+l.Margin)
		}
	}
}

// leaseOf returns the etcd lease of key's lease record
// "<prefix><base64url(key)>/l", as documented in docs/etcd.md.
func leaseOf(t testing.TB, cli *clientv3.Client, prefix, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix+base64.RawURLEncoding.EncodeToString([]byte(key))+"/l")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("no etcd lease for key %q", key)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestStaleReleaseCannotDeleteNewerHolder is etcd issue 22082's case: a
// release that is resent, or sent late by a holder whose lease ended, must
// not delete the key of the holder that came next. (etcd's Mutex.Unlock
// deletes its key by name and has exactly this bug.)
func TestStaleReleaseCannotDeleteNewerHolder(t *testing.T) {
	cli := etcdtest.Client(t)
	b, _ := newBackend(t, cli)
	ctx := context.Background()

	// Released, then resent after the next holder got the key.
	a := mustGrant(t, b, req("k", "A", time.Minute))
	if err := b.Release(ctx, "k", "A"); err != nil {
		t.Fatal(err)
	}
	bl := mustGrant(t, b, req("k", "B", time.Minute))
	for range 3 {
		if err := b.Release(ctx, "k", "A"); !errors.Is(err, backend.ErrLeaseNotFound) {
			t.Fatalf("stale release: %v, want ErrLeaseNotFound", err)
		}
	}
	wantToken(t, b, "k", bl.Token, true)
	if bl.Token <= a.Token {
		t.Fatalf("tokens %d then %d", a.Token, bl.Token)
	}

	// Expired, then released late after the next holder got the key.
	x := mustGrant(t, b, backend.Request{Key: "e", LeaseID: "X", Timeout: 500 * time.Millisecond, Margin: 500 * time.Millisecond})
	waitFree(t, b, "e")
	y := mustGrant(t, b, req("e", "Y", time.Minute))
	if err := b.Release(ctx, "e", "X"); !errors.Is(err, backend.ErrLeaseNotFound) {
		t.Fatalf("late release: %v, want ErrLeaseNotFound", err)
	}
	if _, err := b.Renew(ctx, req("e", "X", time.Minute)); !errors.Is(err, backend.ErrLeaseNotFound) {
		t.Fatalf("late renew: %v, want ErrLeaseNotFound", err)
	}
	wantToken(t, b, "e", y.Token, true)
	if y.Token <= x.Token {
		t.Fatalf("tokens %d then %d", x.Token, y.Token)
	}
}

// waitFree polls until key has no live lease, for at most 5s.
func waitFree(t testing.TB, b backend.Backend, key string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, live, err := b.Token(context.Background(), key); err == nil && !live {
			return
		}
	}
	t.Fatalf("key %q still live after 5s", key)
}

// TestLateRenewalInRevokeWindow renews just after the TTL ran out, before or
// after etcd's revoke loop deleted the key: either way ErrLeaseExpired, and
// the lease stays dead.
func TestLateRenewalInRevokeWindow(t *testing.T) {
	cli := etcdtest.Client(t)
	b, _ := newBackend(t, cli)
	ctx := context.Background()
	for i := range 3 {
		key := fmt.Sprint("window", i)
		r := backend.Request{Key: key, LeaseID: "L", Timeout: 500 * time.Millisecond, Margin: 500 * time.Millisecond}
		l := mustGrant(t, b, r)
		// ExpiresAt is the local send time + TTL; the leader's timer
		// started up to a round trip later (more on a loaded machine).
		time.Sleep(time.Until(l.ExpiresAt) + time.Duration(i)*150*time.Millisecond + 100*time.Millisecond)
		for _, timeout := range []time.Duration{r.Timeout, time.Minute} { // keep-alive path, re-lease path
			r.Timeout = timeout
			if _, err := b.Renew(ctx, r); !errors.Is(err, backend.ErrLeaseExpired) {
				t.Fatalf("renewal %d (timeout %v) after TTL: %v, want ErrLeaseExpired", i, timeout, err)
			}
		}
		wantToken(t, b, key, 0, false)
		if _, err := b.Grant(ctx, r); !errors.Is(err, backend.ErrLeaseExpired) {
			t.Fatalf("resent grant after TTL: %v, want ErrLeaseExpired", err)
		}
		if err := b.Release(ctx, key, "L"); !errors.Is(err, backend.ErrLeaseExpired) {
			t.Fatalf("release after TTL: %v, want ErrLeaseExpired", err)
		}
	}
}

// TestRenewChangesTTL: a renewal asking for other seconds moves the key to a
// new etcd lease, keeps the token, and leaves no old etcd lease behind.
func TestRenewChangesTTL(t *testing.T) {
	cli := etcdtest.NewClient(t, etcdtest.Start(t).Endpoints()) // counts leases: a server of its own
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	base := leaseCount(t, cli)
	l := mustGrant(t, b, req("k", "A", 2*time.Second))
	for _, timeout := range []time.Duration{time.Minute, 2 * time.Second, 2 * time.Second, 10 * time.Second} {
		r, err := b.Renew(ctx, req("k", "A", timeout))
		if err != nil {
			t.Fatalf("Renew(%v): %v", timeout, err)
		}
		if r.Token != l.Token || r.TTL < timeout {
			t.Fatalf("Renew(%v) = token %d TTL %v, want token %d and TTL >= %v", timeout, r.Token, r.TTL, l.Token, timeout)
		}
		ttl, err := cli.TimeToLive(ctx, leaseOf(t, cli, prefix, "k"))
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Duration(ttl.GrantedTTL) * time.Second; got != r.TTL+r.Margin {
			t.Fatalf("etcd lease of %v, renewal reports %v", got, r.TTL+r.Margin)
		}
		if n := leaseCount(t, cli) - base; n != 1 {
			t.Fatalf("%d etcd leases after a renewal, want 1", n)
		}
		wantToken(t, b, "k", l.Token, true)
	}
}

// TestOrphanLeasesBounded: failed, resent and released grants leave no etcd
// leases behind but the one the backend keeps for reuse, and Close revokes
// that one.
func TestOrphanLeasesBounded(t *testing.T) {
	c := etcdtest.NewClient(t, etcdtest.Start(t).Endpoints()) // counts leases: a server of its own
	b, _ := newBackend(t, c)
	ctx := context.Background()
	holder := mustGrant(t, b, req("held", "H", time.Minute))
	for i := range 100 {
		if _, err := b.Grant(ctx, req("held", fmt.Sprint("other", i), time.Minute)); !errors.Is(err, backend.ErrLeaseHeld) {
			t.Fatalf("grant on a held key: %v", err)
		}
		if l, err := b.Grant(ctx, req("held", "H", time.Minute)); err != nil || l.Token != holder.Token {
			t.Fatalf("resent grant: %v, %v", l, err)
		}
		id := fmt.Sprint("cycle", i)
		mustGrant(t, b, req("free", id, time.Minute))
		if err := b.Release(ctx, "free", id); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Grant(ctx, req("free", id, time.Minute)); !errors.Is(err, backend.ErrLeaseNotFound) {
			t.Fatalf("grant resent after release: %v", err)
		}
	}
	// The holder's, and one kept for reuse that carried every other grant.
	if n := leaseCount(t, c); n != 2 {
		t.Fatalf("%d etcd leases after 400 grants with one live lease, want 2 (one pooled)", n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(t, c); n != 1 {
		t.Fatalf("%d etcd leases after Close, want the live lease's alone", n)
	}
}

// TestAmbiguousGrantResolves cuts grants short with tiny deadlines, so that
// some end with ErrOutcomeUnknown, and resends each with the same ID: the
// resend settles it, and the key holds exactly the lease the caller believes.
func TestAmbiguousGrantResolves(t *testing.T) {
	cli := etcdtest.Client(t)
	b, _ := newBackend(t, cli)
	ctx := context.Background()
	var unknown, resolvedGranted int
	var last uint64
	for i := 0; i < 300 && unknown < 20; i++ {
		r := backend.Request{Key: "amb", LeaseID: fmt.Sprint("amb", i), Timeout: time.Minute, Margin: time.Second}
		short, cancel := context.WithTimeout(ctx, time.Duration(i%40)*100*time.Microsecond)
		l, err := b.Grant(short, r)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, backend.ErrOutcomeUnknown):
			unknown++
			// The cause stays visible: the caller's deadline, or the
			// server's own timeout when it gave up first (a busy machine).
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, rpctypes.ErrTimeout) {
				t.Fatalf("ambiguous error %v does not keep the original error", err)
			}
			if l, err = b.Grant(ctx, r); err != nil {
				t.Fatalf("resent grant: %v", err)
			}
			resolvedGranted++
		default:
			continue // cut short before the Txn: nothing happened
		}
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
		wantToken(t, b, "amb", l.Token, true)
		if err := b.Release(ctx, "amb", r.LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	if unknown == 0 {
		t.Fatal("no grant was cut short after its Txn was sent: the test proved nothing")
	}
	t.Logf("%d ambiguous grants, all settled by a resend", unknown)
}

// TestCompaction: compacting the whole history mid-lease disturbs neither
// token checks nor renewals nor releases, and tokens still grow.
func TestCompaction(t *testing.T) {
	cli := etcdtest.NewClient(t, etcdtest.Start(t).Endpoints()) // compacts: a server of its own
	b, _ := newBackend(t, cli)
	ctx := context.Background()
	l := mustGrant(t, b, req("k", "A", time.Minute))
	for i := range 20 {
		if _, err := cli.Put(ctx, "fencing-test/filler", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	compact := func() {
		resp, err := cli.Put(ctx, "fencing-test/filler", "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}
	compact()
	wantToken(t, b, "k", l.Token, true)
	for _, timeout := range []time.Duration{time.Minute, 2 * time.Minute} {
		r, err := b.Renew(ctx, req("k", "A", timeout))
		if err != nil || r.Token != l.Token {
			t.Fatalf("Renew after compaction: %v, %v", r, err)
		}
		compact()
	}
	if err := b.Release(ctx, "k", "A"); err != nil {
		t.Fatalf("Release after compaction: %v", err)
	}
	compact()
	if err := b.Release(ctx, "k", "A"); err != nil {
		t.Fatalf("resent Release after compaction: %v", err)
	}
	next := mustGrant(t, b, req("k", "B", time.Minute))
	if next.Token <= l.Token {
		t.Fatalf("token %d after compaction, earlier %d", next.Token, l.Token)
	}
}

// TestRestart: etcd, fsyncing, stopped and started again on its data
// keeps tokens and live leases (conformance.RunRestart).
func TestRestart(t *testing.T) {
	conformance.RunRestart(t, &restarter{m: etcdtest.Start(t, etcdtest.WithFsync()), prefix: newPrefix("restart")})
}

// TestRestartWait: waiters wait through a kill -9 and restart of etcd
// (conformance.RunRestartWait).
func TestRestartWait(t *testing.T) {
	conformance.RunRestartWait(t, &restarter{m: etcdtest.Start(t, etcdtest.WithFsync()), prefix: newPrefix("restart-wait")})
}

// restarter is a conformance.Restarter on a member of the test's own, with
// fsync on: Kill is SIGKILL.
type restarter struct {
	m      *etcdtest.Member
	prefix string
}

func (r *restarter) NewBackend(_ context.Context, t testing.TB) (backend.Backend, error) {
	return etcdbackend.New(context.Background(), etcdtest.NewClient(t, r.m.Endpoints()), etcdbackend.WithPrefix(r.prefix))
}

func (r *restarter) Kill(testing.TB) { r.m.Kill() }

func (r *restarter) Start(t testing.TB) {
	if err := r.m.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
}

func (r *restarter) Traits() conformance.Traits { return (&harness{}).Traits() }

func TestCloseKeepsClient(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx := context.Background()
	if _, err := cli.Get(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()
	b, err := etcdbackend.New(context.Background(), cli, etcdbackend.WithPrefix(newPrefix("close")))
	if err != nil {
		t.Fatal(err)
	}
	l := mustGrant(t, b, req("k", "A", 2*time.Second))
	if _, err := b.Renew(ctx, req("k", "A", 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Renew(ctx, req("k", "A", 3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant(ctx, req("k2", "B", time.Second)); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Grant after Close: %v", err)
	}
	if _, err := b.Renew(ctx, req("k", "A", time.Second)); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Renew after Close: %v", err)
	}
	if err := b.Release(ctx, "k", "A"); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Release after Close: %v", err)
	}
	if _, _, err := b.Token(ctx, "k"); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Token after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The client is the user's: still open.
	b2, _ := newBackend(t, cli)
	if err := b2.Release(ctx, "k", "A"); err == nil {
		t.Fatal("another prefix's backend released the lease")
	}
	if _, err := cli.Get(ctx, "after-close"); err != nil {
		t.Fatalf("client unusable after backend Close: %v", err)
	}
	b2.Close() // its reclaiming sweep runs until then
	if err := goleak.Find(ignore); err != nil {
		t.Fatalf("goroutines left after Close: %v", err)
	}
	_ = l
}

// TestBadInputNoRoundTrip: invalid requests fail before reaching etcd, with
// the typed errors, and write nothing.
func TestBadInputNoRoundTrip(t *testing.T) {
	cli := etcdtest.Client(t)
	prefix := newPrefix("bad")
	b, err := etcdbackend.New(context.Background(), cli, etcdbackend.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	long := strings.Repeat("k", backend.MaxKeyLength+1)
	cases := []struct {
		err  error
		want error
	}{
		{grantErr(b, backend.Request{Key: "", LeaseID: "a", Timeout: time.Second}), backend.ErrInvalidKey},
		{grantErr(b, backend.Request{Key: long, LeaseID: "a", Timeout: time.Second}), backend.ErrInvalidKey},
		{grantErr(b, backend.Request{Key: "k", LeaseID: "a"}), backend.ErrInvalidTimeout},
		{grantErr(b, backend.Request{Key: "k", LeaseID: "a", Timeout: time.Second, Margin: -1}), backend.ErrInvalidMargin},
		{grantErr(b, backend.Request{Key: "k", LeaseID: "", Timeout: time.Second}), backend.ErrLeaseNotFound},
		{grantErr(b, backend.Request{Key: "k", LeaseID: strings.Repeat("i", 129), Timeout: time.Second}), backend.ErrLeaseNotFound},
		{b.Release(ctx, "", "a"), backend.ErrInvalidKey},
		{b.Release(ctx, "k", ""), backend.ErrLeaseNotFound},
	}
	for i, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("case %d: %v, want %v", i, c.err, c.want)
		}
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("bad input wrote %d keys", resp.Count)
	}
}

func grantErr(b backend.Backend, r backend.Request) error {
	_, err := b.Grant(context.Background(), r)
	return err
}
