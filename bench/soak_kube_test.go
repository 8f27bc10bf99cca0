package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// kubeServer is a kube-apiserver on an etcd of etcdtest's (which, unlike
// kubetest's own, can be killed and started again on its data), with a
// namespace where kubetest.User may use Leases.
type kubeServer struct {
	etcd  *etcdtest.Member
	api   *kubetest.APIServer
	srv   *kubetest.Server
	ns    string
	admin kubernetes.Interface
}

// startKube starts etcd and kube-apiserver for t and makes a namespace.
func startKube(t *testing.T) *kubeServer {
	t.Helper()
	apiBin, _ := kubetest.Binaries(t)
	m := etcdtest.Start(t)
	a, err := kubetest.StartAPIServer(t, apiBin, filepath.Join(t.TempDir(), "api"), m.ClientURL)
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	admin, err := kubernetes.NewForConfig(a.Config(false))
	if err != nil {
		t.Fatal(err)
	}
	srv := &kubetest.Server{API: a, Admin: admin}
	ns, _ := srv.Namespace(t)
	return &kubeServer{etcd: m, api: a, srv: srv, ns: ns, admin: admin}
}

// userConfig is the limited user's client configuration, to host (the
// API server's https://127.0.0.1:port, or a proxy's).
func (k *kubeServer) userConfig(host string) *rest.Config {
	cfg := rest.CopyConfig(k.api.Config(true))
	cfg.Host = host
	return cfg
}

// soakKube is the soak's store on Kubernetes: kubebackend (observed
// expiry, default retention) as the limited user through the fault proxy
// in front of kube-apiserver's TLS port (the proxy carries bytes; the
// client does not check the certificate's name). Its kill alternates
// between kube-apiserver and its etcd, each SIGKILLed and started again on
// its data.
func soakKube(t *testing.T, ttl time.Duration) *soakStore {
	// client-go's klog prints every request a fault cuts short ("Unexpected
	// error when reading response body"): the soak counts the failed
	// rounds instead (global, as for MariaDB's driver).
	klog.SetLogger(logr.Discard())
	k := startKube(t)
	apiHostPort := strings.TrimPrefix(k.api.URL, "https://")
	proxy := faultproxy.Start(t, apiHostPort, faultproxy.Hooks{})
	cfg := k.userConfig("https://" + proxy.Addr())
	user, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := kubebackend.New(ctx, user, k.ns)
	if err != nil {
		t.Fatalf("kubebackend.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	// The sampler's backend, straight to the API server, counts the
	// namespace's Leases (Size: a List); it reclaims nothing.
	direct, err := kubebackend.New(ctx, k.admin, k.ns, kubebackend.WithRetention(0))
	if err != nil {
		t.Fatalf("kubebackend.New (direct): %v", err)
	}
	t.Cleanup(func() { direct.Close() })
	var kills atomic.Int64
	var killed string
	port := apiHostPort[strings.LastIndex(apiHostPort, ":")+1:]
	return &soakStore{
		coord:   fencing.New(b, soakRequestTimeout(ttl)),
		child:   strings.Join([]string{cfg.Host, k.ns, cfg.BearerToken}, " "),
		proxy:   proxy,
		without: []string{"lockmany", "fifo"}, // kubebackend is neither a MultiGranter nor a Queuer
		kill: func(*testing.T) {
			if kills.Add(1)%2 == 1 {
				killed = "kube-apiserver"
				k.api.Kill()
			} else {
				killed = "etcd"
				k.etcd.Kill()
			}
		},
		restart: func(t *testing.T) {
			if killed == "etcd" {
				soakNoErr(t, "etcd restart", k.etcd.Start())
				return
			}
			soakNoErr(t, "kube-apiserver restart", k.api.Start(t))
		},
		conns: func(context.Context) (int, error) {
			n, err := tcpConnsTo(port)
			return n - 1, err // not the sampler's own client
		},
		size: func(ctx context.Context) (int, error) {
			st, err := direct.Size(ctx)
			return int(st.Records), err
		},
	}
}

// soakKubeChild is the child's backend: target is the proxy's URL, the
// namespace and the user's token, separated by spaces.
func soakKubeChild(ctx context.Context, target string) (backend.Backend, error) {
	klog.SetLogger(logr.Discard())
	f := strings.Fields(target)
	if len(f) != 3 {
		return nil, fmt.Errorf("kube soak target %q: want URL, namespace and token", target)
	}
	client, err := kubernetes.NewForConfig(&rest.Config{
		Host: f[0], BearerToken: f[2], TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS: -1, Timeout: 30 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return kubebackend.New(nctx, client, f[1])
}
