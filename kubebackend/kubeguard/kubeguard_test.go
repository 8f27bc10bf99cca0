package kubeguard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/kubebackend/kubeguard"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// configMaps is the rule the tests fence: ConfigMaps in namespaces
// labelled fenced=true.
func install(t *testing.T, srv *kubetest.Server) {
	t.Helper()
	rules := []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"fenced": "true"}}
	if err := kubeguard.Install(context.Background(), srv.Admin, "fencing-test", rules, sel); err != nil {
		t.Fatalf("Install: %v", err)
	}
}

// fencedNamespace returns a fresh namespace the policy covers.
func fencedNamespace(t *testing.T, srv *kubetest.Server) (string, kubernetes.Interface) {
	t.Helper()
	ns, _ := srv.Namespace(t)
	n, err := srv.Admin.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels["fenced"] = "true"
	if _, err := srv.Admin.CoreV1().Namespaces().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns, srv.Admin
}

func configMap(name string, token uint64, writer string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"writer": writer}}
	kubeguard.Stamp(cm, token)
	return cm
}

// waitInForce writes a probe object until the API server refuses its stale
// update: a new policy takes effect after its informer syncs.
func waitInForce(t *testing.T, client kubernetes.Interface, ns string) time.Duration {
	t.Helper()
	ctx := context.Background()
	cms := client.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, configMap("probe", 10, "probe"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := cms.Update(ctx, configMap("probe", 5, "stale probe"), metav1.UpdateOptions{})
		if errors.Is(kubeguard.Stale(err), guard.ErrStaleToken) {
			return time.Since(start)
		}
		if err == nil { // not in force yet: set the fence back up
			if _, err := cms.Update(ctx, configMap("probe", 10, "probe"), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Fatalf("probe update: %v", err)
		}
		if time.Since(start) > time.Minute {
			t.Fatal("the policy was not in force a minute after it was installed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStaleUpdateRefused: an update with a lower token than the object's is
// refused by the API server with a clear status, and changes nothing; an
// equal or higher one passes; an update that drops the annotation is
// refused.
func TestStaleUpdateRefused(t *testing.T) {
	srv := kubetest.Shared(t)
	install(t, srv)
	ns, client := fencedNamespace(t, srv)
	t.Logf("policy in force after %v", waitInForce(t, client, ns))
	ctx := context.Background()
	cms := client.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, configMap("target", 7, "holder-7"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cms.Update(ctx, configMap("target", 6, "holder-6"), metav1.UpdateOptions{})
	if !errors.Is(kubeguard.Stale(err), guard.ErrStaleToken) {
		t.Fatalf("update with token 6 over 7: %v, want a refusal wrapping guard.ErrStaleToken", err)
	}
	t.Logf("the refusal: %v", err)
	got, err := cms.Get(ctx, "target", metav1.GetOptions{})
	if err != nil || got.Data["writer"] != "holder-7" {
		t.Fatalf("after the refused write: %v, %v; want holder-7's data", got.Data, err)
	}
	for _, tok := range []uint64{7, 8} {
		if _, err := cms.Update(ctx, configMap("target", tok, fmt.Sprint("holder-", tok)), metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update with token %d: %v", tok, err)
		}
	}
	bare := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Data: map[string]string{"writer": "no token"}}
	if _, err := cms.Update(ctx, bare, metav1.UpdateOptions{}); !errors.Is(kubeguard.Stale(err), guard.ErrStaleToken) {
		t.Fatalf("update without the annotation: %v, want a refusal", err)
	}
}

// TestRacingWritersFenceNeverGoesDown: writers with racing tokens send
// unconditional updates (no resourceVersion: the API server picks the
// stored object to compare with); every state a watch sees has a token at
// least the one before, each refused token is below the highest, and the
// highest token's write is the last one.
func TestRacingWritersFenceNeverGoesDown(t *testing.T) {
	srv := kubetest.Shared(t)
	install(t, srv)
	ns, client := fencedNamespace(t, srv)
	waitInForce(t, client, ns)
	ctx := context.Background()
	cms := client.CoreV1().ConfigMaps(ns)
	created, err := cms.Create(ctx, configMap("raced", 1, "first"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=raced", ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	const writers, each = 8, 10
	tokens := rand.Perm(writers * each)
	var (
		mu       sync.Mutex
		accepted []int
		refused  []int
		wg       sync.WaitGroup
	)
	for i := range writers {
		wg.Go(func() {
			for _, tok := range tokens[i*each : (i+1)*each] {
				tok += 2 // above the first write's 1
				_, err := cms.Update(ctx, configMap("raced", uint64(tok), strconv.Itoa(tok)), metav1.UpdateOptions{})
				mu.Lock()
				switch {
				case err == nil:
					accepted = append(accepted, tok)
				case errors.Is(kubeguard.Stale(err), guard.ErrStaleToken):
					refused = append(refused, tok)
				default:
					t.Errorf("update with token %d: %v", tok, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	highest := writers*each + 1
	sort.Ints(accepted)
	if len(accepted) == 0 || accepted[len(accepted)-1] != highest {
		t.Fatalf("accepted %v: the highest token %d must pass", accepted, highest)
	}
	for _, tok := range refused {
		if tok >= highest {
			t.Fatalf("token %d refused, yet no token above it was written", tok)
		}
	}
	prev := uint64(1)
	seen := 0
	for seen < len(accepted) {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				t.Fatalf("watch event %v", ev.Type)
			}
			tok, _ := kubeguard.Token(ev.Object.(*corev1.ConfigMap))
			if tok < prev {
				t.Fatalf("the object's token went down from %d to %d", prev, tok)
			}
			prev = tok
			seen++
		case <-time.After(time.Minute):
			t.Fatalf("saw %d of %d accepted writes", seen, len(accepted))
		}
	}
	t.Logf("%d writers, %d updates: %d accepted, %d refused as stale; the token never went down", writers, writers*each, len(accepted), len(refused))
}

// BenchmarkUpdate measures an update of a fenced ConfigMap and of one the
// policy does not cover: the policy's cost per write.
func BenchmarkUpdate(b *testing.B) {
	srv := kubetest.Shared(b)
	rules := []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"fenced": "true"}}
	if err := kubeguard.Install(context.Background(), srv.Admin, "fencing-bench", rules, sel); err != nil {
		b.Fatal(err)
	}
	for _, fenced := range []bool{false, true} {
		b.Run(fmt.Sprintf("fenced=%v", fenced), func(b *testing.B) {
			ctx := context.Background()
			ns, _ := srv.Namespace(b)
			if fenced {
				n, _ := srv.Admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
				n.Labels["fenced"] = "true"
				if _, err := srv.Admin.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			cms := srv.Admin.CoreV1().ConfigMaps(ns)
			if _, err := cms.Create(ctx, configMap("bench", 1, "w"), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			tok := uint64(1)
			for b.Loop() {
				tok++
				if _, err := cms.Update(ctx, configMap("bench", tok, "w"), metav1.UpdateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
