package kubebackend_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// fakeClock is a monotonic clock that a test moves ahead of real time.
type fakeClock struct{ ahead atomic.Int64 }

func (c *fakeClock) now() time.Time             { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *fakeClock) advance(d time.Duration)    { c.ahead.Add(int64(d)) }
func (c *fakeClock) option() kubebackend.Option { return kubebackend.WithClock(c.now) }

// hooked is a client acting as the test's user whose next request with
// method on a Lease runs the hook first (once), for a test to put another
// write between a backend's read and its write.
type hooked struct {
	kubernetes.Interface
	method string
	hook   atomic.Pointer[func()]
}

func newHooked(t *testing.T, srv *kubetest.Server, method string) *hooked {
	t.Helper()
	h := &hooked{method: method}
	cfg := srv.API.Config(true)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == h.method && strings.Contains(r.URL.Path, "/leases/") {
				if f := h.hook.Swap(nil); f != nil {
					(*f)()
				}
			}
			return rt.RoundTrip(r)
		})
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.Interface = c
	return h
}

func (h *hooked) before(f func()) { h.hook.Store(&f) }

func (h *hooked) fired() bool { return h.hook.Load() == nil }

func reclaimed(t *testing.T, b *kubebackend.Backend) uint64 {
	t.Helper()
	st, err := b.Size(context.Background())
	if err != nil {
		t.Fatalf("Size: %v", err)
	}
	return st.Reclaimed
}

// TestReclaimRacesGrant: a reclaiming delete and a grant on the same key,
// each put between the other's read and write. The grant that wrote first
// wins (the delete's resourceVersion precondition fails and the lease
// stays); the delete that came first makes the grant read again and
// create the Lease, with a token above the key's earlier ones.
func TestReclaimRacesGrant(t *testing.T) {
	srv := kubetest.Shared(t)
	ctx := context.Background()
	req := func(key, id string) backend.Request {
		return backend.Request{Key: key, LeaseID: id, Timeout: time.Minute}
	}
	// setup returns a sweeper (retention 1h, on a fake clock) and a
	// granter on a fresh namespace, both through client, with key granted,
	// released, seen released by the sweeper and idle past the retention
	// on its clock.
	setup := func(t *testing.T, client kubernetes.Interface, key string) (sweeper, granter *kubebackend.Backend, old backend.Lease) {
		ns, _ := srv.Namespace(t) // client acts as the same user
		var clock fakeClock
		var err error
		sweeper, err = kubebackend.New(ctx, client, ns, kubebackend.WithRetention(time.Hour), clock.option())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sweeper.Close() })
		granter, err = kubebackend.New(ctx, client, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = granter.Close() })
		if old, err = granter.Grant(ctx, req(key, "first")); err != nil {
			t.Fatal(err)
		}
		if err := granter.Release(ctx, key, "first"); err != nil {
			t.Fatal(err)
		}
		if st, err := sweeper.Inspect(ctx, key); err != nil || st.MaxToken != old.Token {
			t.Fatalf("Inspect = %+v, %v", st, err)
		}
		clock.advance(2 * time.Hour)
		return sweeper, granter, old
	}
	t.Run("GrantWritesFirst", func(t *testing.T) {
		const key = "race-grant-first"
		h := newHooked(t, srv, http.MethodDelete)
		sweeper, granter, old := setup(t, h, key)
		var won backend.Lease
		var grantErr error
		h.before(func() { won, grantErr = granter.Grant(ctx, req(key, "winner")) })
		if err := kubebackend.Sweep(ctx, sweeper); err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if !h.fired() || grantErr != nil {
			t.Fatalf("the grant between the pass's read and its delete: fired %v, %v", h.fired(), grantErr)
		}
		if won.Token <= old.Token {
			t.Fatalf("the racing grant's token %d, not above %d", won.Token, old.Token)
		}
		if n := reclaimed(t, sweeper); n != 0 {
			t.Fatalf("Reclaimed = %d after a pass whose delete a grant preceded; want 0", n)
		}
		if tok, live, err := granter.Token(ctx, key); err != nil || !live || tok != won.Token {
			t.Fatalf("Token after the pass = %d, %v, %v; want %d, live: the pass deleted a live lease", tok, live, err, won.Token)
		}
	})
	t.Run("DeleteFirst", func(t *testing.T) {
		const key = "race-delete-first"
		h := newHooked(t, srv, http.MethodPut)
		sweeper, granter, old := setup(t, h, key)
		var sweepErr error
		h.before(func() { sweepErr = kubebackend.Sweep(ctx, sweeper) })
		l, err := granter.Grant(ctx, req(key, "after"))
		if err != nil {
			t.Fatalf("Grant whose Lease was deleted between its read and its write: %v", err)
		}
		if !h.fired() || sweepErr != nil {
			t.Fatalf("the pass between the grant's read and its write: fired %v, %v", h.fired(), sweepErr)
		}
		if n := reclaimed(t, sweeper); n != 1 {
			t.Fatalf("Reclaimed = %d; want 1", n)
		}
		if l.Token <= old.Token {
			t.Fatalf("token %d after the reclaim, not above %d: a token reissued", l.Token, old.Token)
		}
	})
}

// TestReclaimWaitsForExpiryAndDelay: a pass deletes a Lease only once the
// retention has passed after the lease's end as the backend observes it:
// a holder's lease that ran out counts from ttl + margin after the state
// was first seen, a forced release's lock delay from when it was written.
// A live lease is never deleted.
func TestReclaimWaitsForExpiryAndDelay(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, user := srv.Namespace(t)
	ctx := context.Background()
	var clock fakeClock
	const d = time.Hour
	b, err := kubebackend.New(ctx, user, ns, kubebackend.WithRetention(d), clock.option())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const ttl, delay = 10 * time.Minute, 50 * time.Second
	if _, err := b.Grant(ctx, backend.Request{Key: "expires", LeaseID: "a", Timeout: ttl}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant(ctx, backend.Request{Key: "delayed", LeaseID: "b", Timeout: 10 * d, LockDelay: delay}); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.ForceRelease(ctx, "delayed"); err != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	if _, err := b.Grant(ctx, backend.Request{Key: "live", LeaseID: "c", Timeout: 10 * d}); err != nil {
		t.Fatal(err)
	}
	exists := func(key string) bool {
		t.Helper()
		_, err := user.CoordinationV1().Leases(ns).Get(ctx, kubebackend.LeaseName(key), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	sweepAt := func(ahead time.Duration, want map[string]bool) {
		t.Helper()
		clock.ahead.Store(int64(ahead))
		if err := kubebackend.Sweep(ctx, b); err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		for key, w := range want {
			if got := exists(key); got != w {
				t.Fatalf("%v after the writes: the Lease of %q exists: %v, want %v", ahead, key, got, w)
			}
		}
	}
	// The real time the test takes adds to the clock's lead: each step
	// leaves it 20s or more.
	sweepAt(d+delay-30*time.Second, map[string]bool{"expires": true, "delayed": true, "live": true})
	sweepAt(d+ttl-2*time.Minute, map[string]bool{"expires": true, "delayed": false, "live": true})
	sweepAt(d+ttl+time.Minute, map[string]bool{"expires": false, "live": true})
	if n := reclaimed(t, b); n != 2 {
		t.Fatalf("Reclaimed = %d; want 2", n)
	}
}

// TestRetentionChurnSize churns distinct keys (each granted and released
// once, by 8 goroutines) with the retention off, then makes a second
// backend on the namespace with a retention of 5s, as another process
// would be, and waits for its passes to reclaim every key: the Leases go
// from one per key to none. It logs the counts, the time each step took and
// etcd's size; docs/kubernetes.md quotes the log. FENCING_KUBE_CHURN sets
// the number of keys (default 300).
func TestRetentionChurnSize(t *testing.T) {
	n := 300
	if v := os.Getenv("FENCING_KUBE_CHURN"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("FENCING_KUBE_CHURN=%q: want a positive number", v)
		}
	}
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	ctx := context.Background()
	churner, err := kubebackend.New(ctx, client, ns, kubebackend.WithRetention(0))
	if err != nil {
		t.Fatal(err)
	}
	defer churner.Close()
	size := func(b *kubebackend.Backend) backend.StoreSize {
		t.Helper()
		st, err := b.Size(ctx)
		if err != nil {
			t.Fatalf("Size: %v", err)
		}
		return st
	}
	etcdBefore := etcdSize(t, srv)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				key := fmt.Sprintf("orders/%08d", i)
				if _, err := churner.Grant(ctx, backend.Request{Key: key, LeaseID: "l", Timeout: time.Minute}); err != nil {
					t.Errorf("Grant(%q): %v", key, err)
					return
				}
				if err := churner.Release(ctx, key, "l"); err != nil {
					t.Errorf("Release(%q): %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	churned := time.Since(start)
	peak := size(churner).Records
	t.Logf("%d keys churned in %v (%v a key, 8 goroutines): %d Leases; etcd %s",
		n, churned.Round(time.Millisecond), (churned / time.Duration(n)).Round(time.Microsecond), peak, etcdSize(t, srv).since(etcdBefore, n))
	if peak < int64(n) {
		t.Fatalf("%d Leases after %d keys were leased with the retention off", peak, n)
	}
	const d = 5 * time.Second
	sweeper, err := kubebackend.New(ctx, client, ns, kubebackend.WithRetention(d))
	if err != nil {
		t.Fatal(err)
	}
	defer sweeper.Close()
	made := time.Now()
	for {
		time.Sleep(d / 8)
		st := size(sweeper)
		if st.Records == 0 {
			t.Logf("all reclaimed %v after the second backend was made (retention %v; %d by it): 0 Leases; etcd %s",
				time.Since(made).Round(time.Millisecond), d, st.Reclaimed, etcdSize(t, srv).since(etcdBefore, n))
			break
		}
		// The backend's bound is d + d/4 and a pass: a pass deletes one
		// Lease a request. Five minutes plus 50ms a key is where the test
		// gives up.
		if time.Since(made) > 5*time.Minute+time.Duration(n)*50*time.Millisecond {
			t.Fatalf("%v after the second backend was made: %d Leases left, %d reclaimed", time.Since(made), st.Records, st.Reclaimed)
		}
	}
}

// etcdStats is what etcd's metrics say of its database.
type etcdStats struct{ total, inUse, keys float64 }

func (s etcdStats) since(before etcdStats, n int) string {
	return fmt.Sprintf("db %.1f MB (in use %.1f MB, %+.0f B a key since the start), %.0f keys (%+.0f)",
		s.total/1e6, s.inUse/1e6, (s.inUse-before.inUse)/float64(n), s.keys, s.keys-before.keys)
}

// etcdSize reads etcd's database size and key count from its metrics.
func etcdSize(t *testing.T, srv *kubetest.Server) etcdStats {
	t.Helper()
	resp, err := http.Get(srv.Etcd.URL + "/metrics")
	if err != nil {
		t.Fatalf("etcd metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var s etcdStats
	for _, line := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		switch name {
		case "etcd_mvcc_db_total_size_in_bytes":
			s.total = f
		case "etcd_mvcc_db_total_size_in_use_in_bytes":
			s.inUse = f
		case "etcd_debugging_mvcc_keys_total":
			s.keys = f
		}
	}
	return s
}

// BenchmarkGrantReleaseRetention: a grant and a release of a new key each
// time (the workload the retention is for), with the retention off, at
// its default (no pass runs in a benchmark's time) and at 1s (passes
// listing and deleting the keys of a second before while the grants run).
func BenchmarkGrantReleaseRetention(b *testing.B) {
	for _, c := range []struct {
		name string
		d    time.Duration
	}{{"Off", 0}, {"Default", kubebackend.DefaultRetention}, {"1s", time.Second}} {
		b.Run(c.name, func(b *testing.B) {
			srv := kubetest.Shared(b)
			ns, client := srv.Namespace(b)
			ctx := context.Background()
			kb, err := kubebackend.New(ctx, client, ns, kubebackend.WithRetention(c.d))
			if err != nil {
				b.Fatal(err)
			}
			defer kb.Close()
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprint("bench-", i)
				if _, err := kb.Grant(ctx, backend.Request{Key: key, LeaseID: "l", Timeout: time.Minute}); err != nil {
					b.Fatal(err)
				}
				if err := kb.Release(ctx, key, "l"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
