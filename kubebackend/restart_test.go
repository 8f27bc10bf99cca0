package kubebackend_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// restarter kills kube-apiserver with SIGKILL and starts it again on the
// same etcd. The backend (the process using it) lives on: NewBackend hands
// out the one backend, so its observations survive as a process's would.
type restarter struct {
	srv *kubetest.Server
	b   *kubebackend.Backend
}

func (r *restarter) NewBackend(context.Context, testing.TB) (backend.Backend, error) {
	return keepOpen{r.b}, nil
}

func (r *restarter) Kill(testing.TB) { r.srv.API.Kill() }

func (r *restarter) Start(t testing.TB) {
	if err := r.srv.API.Start(t); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
}

func (r *restarter) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: 2 * time.Second, Slack: 500 * time.Millisecond}
}

// keepOpen is the backend with a Close that leaves it open.
type keepOpen struct{ *kubebackend.Backend }

func (keepOpen) Close() error { return nil }

// TestServerFaults runs on servers of its own:
//
//   - KillAPIServer: kill -9 of kube-apiserver and a restart on the same
//     etcd lose no token, no live lease and no expiry;
//   - WaitThroughRestart: waiters wait through it (conformance.RunRestartWait);
//   - EtcdStopped: with etcd SIGSTOPped, requests fail when their context
//     ends and change nothing; once it runs again, the holder renews with
//     its token and the key is still held against others;
//   - TwoAPIServers: a client alternating between two API servers on one
//     etcd sees tokens increase and one winner of racing grants;
//   - ReclaimAcrossRestart: keys reclaimed (WithRetention) around kill -9
//     of kube-apiserver and its restart get tokens above all their old ones.
func TestServerFaults(t *testing.T) {
	srv := kubetest.Start(t)
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(context.Background(), client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t.Run("KillAPIServer", func(t *testing.T) {
		conformance.RunRestart(t, &restarter{srv: srv, b: b})
	})
	t.Run("WaitThroughRestart", func(t *testing.T) {
		conformance.RunRestartWait(t, &restarter{srv: srv, b: b})
	})
	t.Run("EtcdStopped", func(t *testing.T) {
		ctx := context.Background()
		req := backend.Request{Key: "etcd-stopped", LeaseID: "holder", Timeout: time.Minute, Margin: time.Second}
		l, err := b.Grant(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Etcd.Process().Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := true
		defer func() {
			if stopped {
				_ = srv.Etcd.Process().Signal(syscall.SIGCONT)
			}
		}()
		for _, op := range []func(context.Context) error{
			func(ctx context.Context) error { _, err := b.Renew(ctx, req); return err },
			func(ctx context.Context) error {
				_, err := b.Grant(ctx, backend.Request{Key: req.Key, LeaseID: "other", Timeout: time.Minute})
				return err
			},
		} {
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err := op(rctx)
			cancel()
			if err == nil {
				t.Fatal("a request succeeded with etcd stopped")
			}
			t.Logf("with etcd stopped: %v", err)
		}
		_ = srv.Etcd.Process().Signal(syscall.SIGCONT)
		stopped = false
		var renewed backend.Lease
		for end := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if renewed, err = b.Renew(ctx, req); err == nil || time.Now().After(end) {
				break
			}
		}
		if err != nil || renewed.Token != l.Token {
			t.Fatalf("Renew after etcd resumed = %+v, %v; want token %d", renewed, err, l.Token)
		}
		if _, err := b.Grant(ctx, backend.Request{Key: req.Key, LeaseID: "other", Timeout: time.Minute}); !errors.Is(err, backend.ErrLeaseHeld) {
			t.Fatalf("another Grant after etcd resumed: %v, want ErrLeaseHeld", err)
		}
	})
	t.Run("TwoAPIServers", func(t *testing.T) {
		apiBin, _ := kubetest.Binaries(t)
		second, err := kubetest.StartAPIServer(t, apiBin, filepath.Join(t.TempDir(), "api2"), srv.Etcd.URL)
		if err != nil {
			t.Fatalf("second kube-apiserver: %v", err)
		}
		u2, _ := url.Parse(second.URL)
		var n atomic.Int64
		cfg := srv.API.Config(true)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if n.Add(1)%2 == 0 {
					r = r.Clone(r.Context())
					r.URL.Host, r.Host = u2.Host, u2.Host
				}
				return rt.RoundTrip(r)
			})
		}
		alt, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ab, err := kubebackend.New(context.Background(), alt, ns)
		if err != nil {
			t.Fatal(err)
		}
		defer ab.Close()
		ctx := context.Background()
		var prev uint64
		for i := range 10 {
			id := fmt.Sprint("alternating-", i)
			l, err := ab.Grant(ctx, backend.Request{Key: "two-servers", LeaseID: id, Timeout: time.Minute})
			if err != nil {
				t.Fatalf("Grant %d: %v", i, err)
			}
			if l.Token <= prev {
				t.Fatalf("token %d after %d", l.Token, prev)
			}
			prev = l.Token
			if err := ab.Release(ctx, "two-servers", id); err != nil {
				t.Fatalf("Release %d: %v", i, err)
			}
		}
		var wins atomic.Int64
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				_, err := ab.Grant(ctx, backend.Request{Key: "two-servers-race", LeaseID: fmt.Sprint("racer-", i), Timeout: time.Minute})
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, backend.ErrLeaseHeld):
					t.Errorf("racer %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d racing grants won across two API servers, want 1", wins.Load())
		}
	})
	t.Run("ReclaimAcrossRestart", func(t *testing.T) {
		reclaimAcrossRestart(t, srv)
	})
}

// reclaimAcrossRestart leases keys, kills kube-apiserver while they idle
// past a retention of 1s (the passes of that time fail), starts it again,
// waits for the keys to be reclaimed, restarts it once more and leases each
// key again: every new token is above every old one (the new Leases'
// resourceVersions come from etcd's revision, which no restart of the API
// server or reclaim sets back).
func reclaimAcrossRestart(t *testing.T, srv *kubetest.Server) {
	ctx := context.Background()
	const retention = time.Second
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(ctx, client, ns, kubebackend.WithRetention(retention))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	restart := func() {
		t.Helper()
		srv.API.Kill()
		time.Sleep(2 * retention) // the keys idle past the retention meanwhile
		if err := srv.API.Start(t); err != nil {
			t.Fatalf("restart kube-apiserver: %v", err)
		}
	}
	const n = 10
	var highest uint64
	key := func(i int) string { return fmt.Sprint("reclaim-restart-", i) }
	for i := range n {
		l, err := b.Grant(ctx, backend.Request{Key: key(i), LeaseID: fmt.Sprint("old-", i), Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, l.Key, l.LeaseID); err != nil {
			t.Fatal(err)
		}
		highest = max(highest, l.Token)
	}
	restart()
	start := time.Now()
	for {
		st, err := b.Size(ctx)
		if err == nil && st.Records == 0 {
			t.Logf("all %d keys reclaimed %v after the restart (%d by this backend)", n, time.Since(start).Round(time.Millisecond), st.Reclaimed)
			break
		}
		if time.Since(start) > 10*retention+30*time.Second { // conformance's RetentionChurn's bound
			t.Fatalf("%v after the restart: Size = %+v, %v; want no records", time.Since(start), st, err)
		}
		time.Sleep(retention / 8)
	}
	restart()
	for i := range n {
		var l backend.Lease
		for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if l, err = b.Grant(ctx, backend.Request{Key: key(i), LeaseID: fmt.Sprint("new-", i), Timeout: time.Minute}); err == nil || time.Now().After(end) {
				break
			}
		}
		if err != nil {
			t.Fatalf("Grant(%q) after the restart: %v", key(i), err)
		}
		if l.Token <= highest {
			t.Fatalf("Grant(%q) after its reclaim and two restarts: token %d, not above %d, the highest before: a token reissued", key(i), l.Token, highest)
		}
	}
}
