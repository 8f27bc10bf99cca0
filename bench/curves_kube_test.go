package bench

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/kubebackend"
)

// curveKubeFillers is how many Creates the Kubernetes fill keeps in flight.
const curveKubeFillers = 32

// curveKube is a kube-apiserver and its etcd of their own (instance: the
// reference is another pair), kubebackend as the limited user with the
// retention off (the fill's idle Leases stay, as idle rows stay in the
// SQL stores). bytes is etcd's database size in use: the Leases and
// everything else the API server keeps, which the curve's baseline takes
// out.
func curveKube(t *testing.T, instance string) *curveStore {
	klog.SetLogger(logr.Discard())
	k := startKube(t)
	newBackend := func(t *testing.T) backend.Backend {
		cfg := k.userConfig(k.api.URL)
		// client-go shares one transport (one HTTP/2 connection) among
		// clients of equal TLS settings in a process; a Proxy function
		// makes the transport this client's own, as a process's is.
		cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := kubebackend.New(ctx, client, k.ns, kubebackend.WithRetention(0))
		if err != nil {
			t.Fatalf("kubebackend.New: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b := newBackend(t)
	etcd := etcdtest.NewClient(t, k.etcd.Endpoints())
	leases := k.admin.CoordinationV1().Leases(k.ns)
	apiPort := k.api.URL[strings.LastIndex(k.api.URL, ":")+1:]
	return &curveStore{
		b:       b,
		another: newBackend,
		fillHow: fmt.Sprintf("Creates (%d in flight, as the admin) of copies of the Lease the backend's own Grant and Release left on a template key", curveKubeFillers),
		fill: func(ctx context.Context, from, to int) error {
			if err := leaveTemplate(ctx, b); err != nil {
				return err
			}
			tmpl, err := leases.Get(ctx, kubebackend.LeaseName(curveTemplate), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if from == 0 && to > 0 {
				r, err := etcd.Get(ctx, "/registry/leases/"+k.ns+"/"+tmpl.Name)
				if err == nil && len(r.Kvs) == 1 {
					t.Logf("%s: the template Lease is %d bytes in etcd (its value, protobuf)", instance, len(r.Kvs[0].Value))
				}
			}
			next := make(chan int)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var first error
			for range curveKubeFillers {
				wg.Go(func() {
					for i := range next {
						l := tmpl.DeepCopy()
						key := keyName(i)
						l.ObjectMeta = metav1.ObjectMeta{
							Name: kubebackend.LeaseName(key), Namespace: k.ns,
							Labels: tmpl.Labels, Annotations: maps.Clone(tmpl.Annotations),
						}
						for a := range l.Annotations {
							if strings.HasSuffix(a, "/key") {
								l.Annotations[a] = base64.StdEncoding.EncodeToString([]byte(key))
							}
						}
						if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
							mu.Lock()
							if first == nil {
								first = fmt.Errorf("create the Lease of %s: %w", key, err)
							}
							mu.Unlock()
						}
					}
				})
			}
			start := time.Now()
			for i := from; i < to; i++ {
				mu.Lock()
				failed := first != nil
				mu.Unlock()
				if failed || ctx.Err() != nil {
					break
				}
				next <- i
			}
			close(next)
			wg.Wait()
			if to > from {
				t.Logf("%s: created %d Leases in %v: %.0f a second; load %s", instance, to-from,
					time.Since(start).Round(time.Millisecond), float64(to-from)/time.Since(start).Seconds(), loadAvg())
			}
			return first
		},
		bytes: func(ctx context.Context) (int64, error) {
			s, err := etcd.Status(ctx, k.etcd.Endpoints()[0])
			if err != nil {
				return 0, err
			}
			return s.DbSizeInUse, nil
		},
		load: func(ctx context.Context) string {
			body, err := k.admin.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
			if err != nil {
				return "error: " + err.Error()
			}
			watches := 0.0
			for _, line := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `resource="leases"`) && strings.Contains(line, `verb="WATCH"`) {
					var v float64
					if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
						watches += v
					}
				}
			}
			conns, _ := tcpConnsTo(apiPort)
			return fmt.Sprintf("TCP connections %d, Lease watches %.0f", conns, watches)
		},
	}
}
