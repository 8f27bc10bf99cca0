package kubeguard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubeguard"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// poison is the token of the merge patch that locked every holder out.
const poison = "18446744073709551615"

// labelled returns a fresh namespace labelled label=true, and the user's
// client there (its Role: leases only).
func labelled(t *testing.T, srv *kubetest.Server, label string) (string, kubernetes.Interface) {
	t.Helper()
	ns, user := srv.Namespace(t)
	n, err := srv.Admin.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels[label] = "true"
	if _, err := srv.Admin.CoreV1().Namespaces().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns, user
}

func configMapRules() []admissionv1.NamedRuleWithOperations {
	return []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}}
}

// fenceAnnotation writes the fence annotation as the raw string v with a
// merge patch, as kubectl annotate would.
func fenceAnnotation(ctx context.Context, client kubernetes.Interface, ns, name, v string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, kubeguard.Annotation, v)
	_, err := client.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func fenceOf(t *testing.T, client kubernetes.Interface, ns, name string) string {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Annotations[kubeguard.Annotation]
}

// TestNonCanonicalTokenRefused: a fence that is not a canonical number
// (leading zeros, signs, spaces, past 2^64-1) is refused as invalid, on an
// update and on a create, and changes nothing; 2^64-1 itself is a number.
func TestNonCanonicalTokenRefused(t *testing.T) {
	srv := kubetest.Shared(t)
	install(t, srv)
	ns, client := fencedNamespace(t, srv)
	waitInForce(t, client, ns)
	ctx := context.Background()
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("target", 7, "holder-7"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"042", "0", "+42", "-1", " 42", "42 ", "4 2", "1e3", "0x2a", "18446744073709551616", "99999999999999999999", "123456789012345678901"} {
		err := fenceAnnotation(ctx, client, ns, "target", v)
		if !errors.Is(kubeguard.Stale(err), guard.ErrInvalidToken) {
			t.Errorf("fence %q: %v, want a refusal wrapping guard.ErrInvalidToken", v, err)
		}
		if got := fenceOf(t, client, ns, "target"); got != "7" {
			t.Fatalf("after fence %q: the object's fence is %q, want 7", v, got)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("new-", i), Annotations: map[string]string{kubeguard.Annotation: v}}}
		if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); !errors.Is(kubeguard.Stale(err), guard.ErrInvalidToken) {
			t.Errorf("create with fence %q: %v, want a refusal wrapping guard.ErrInvalidToken", v, err)
		}
	}
	if err := fenceAnnotation(ctx, client, ns, "target", poison); err != nil {
		t.Fatalf("fence 2^64-1 (no mint check here): %v", err)
	}
}

// TestMintCheckRefusesForgedToken: under WithMintCheck, the merge patch
// that set the fence to 2^64-1 is refused as never minted and changes
// nothing; the real holder's token passes (once the API server's cache
// has seen its grant), and the next holder's too.
func TestMintCheckRefusesForgedToken(t *testing.T) {
	srv := kubetest.Shared(t)
	ctx := context.Background()
	const key = "orders-1"
	ns, _, c, l := mintChecked(t, srv, "fenced-mint", "fencing-mint-test", key)
	cms := srv.Admin.CoreV1().ConfigMaps(ns)
	// The holder's first write: refused as never minted until the API
	// server's cache of the Lease has seen the grant.
	refusals := passesOnceMinted(t, fmt.Sprint("create with the holder's token ", l.Token), func() error {
		_, err := cms.Create(ctx, configMap("target", l.Token, "holder-1"), metav1.CreateOptions{})
		return err
	})
	t.Logf("the holder's token passed after %d refusals as never minted", refusals)
	err := fenceAnnotation(ctx, srv.Admin, ns, "target", poison)
	if !errors.Is(kubeguard.Stale(err), guard.ErrNotMinted) {
		t.Fatalf("the forged token's merge patch: %v, want a refusal wrapping guard.ErrNotMinted", err)
	}
	t.Logf("the refusal: %v", err)
	if got := fenceOf(t, srv.Admin, ns, "target"); got != fmt.Sprint(l.Token) {
		t.Fatalf("after the forged patch the fence is %q, want %d", got, l.Token)
	}
	if err := fenceAnnotation(ctx, srv.Admin, ns, "target", fmt.Sprint(l.Token+1)); !errors.Is(kubeguard.Stale(err), guard.ErrNotMinted) {
		t.Fatalf("token %d, one above the Lease's: %v, want a refusal wrapping guard.ErrNotMinted", l.Token+1, err)
	}
	// The next holder: its token passes once the API server has seen its
	// grant; a refusal as never minted may come first (its cache lags).
	if err := c.Release(ctx, key, l.ID); err != nil {
		t.Fatal(err)
	}
	next, err := c.Grant(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	refusals = passesOnceMinted(t, fmt.Sprint("the next holder's token ", next.Token), func() error {
		return fenceAnnotation(ctx, srv.Admin, ns, "target", fmt.Sprint(next.Token))
	})
	t.Logf("the next holder's token passed %v after its grant, after %d refusals as never minted", time.Since(granted), refusals)
}

// mintChecked makes a fresh namespace labelled label, a backend there (with
// opts) and a lease on key, and installs policy with a mint check on key's
// Lease, for the namespaces labelled label.
func mintChecked(t *testing.T, srv *kubetest.Server, label, policy, key string, opts ...kubebackend.Option) (string, kubernetes.Interface, *fencing.Coordinator, fencing.Lease) {
	t.Helper()
	ns, user := labelled(t, srv, label)
	ctx := context.Background()
	b, err := kubebackend.New(ctx, user, ns, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := fencing.New(b)
	l, err := c.Grant(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}}
	if err := kubeguard.Install(ctx, srv.Admin, policy, configMapRules(), sel, kubeguard.WithMintCheck(ns, key)); err != nil {
		t.Fatalf("Install: %v", err)
	}
	// In force once a create with a forged token is refused.
	cms := srv.Admin.CoreV1().ConfigMaps(ns)
	start := time.Now()
	for i := 0; ; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("probe-", i), Annotations: map[string]string{kubeguard.Annotation: poison}}}
		_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		// The binding of this namespace's Lease, not one left by an
		// earlier run of the test under the same name.
		if errors.Is(kubeguard.Stale(err), guard.ErrNotMinted) && strings.Contains(err.Error(), " Lease "+ns+"/") {
			t.Logf("in force after %v: %v", time.Since(start), err)
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("the mint check was not in force a minute after it was installed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ns, user, c, l
}

// passesOnceMinted calls write until it succeeds, while it is refused as
// never minted (the API server's cache of the Lease lags a grant; and a
// policy just installed may not be in force yet), and returns how many
// refusals came first. Another error, or refusals for a minute, fail t.
func passesOnceMinted(t *testing.T, what string, write func() error) int {
	t.Helper()
	start := time.Now()
	for refusals := 0; ; refusals++ {
		err := write()
		if err == nil {
			return refusals
		}
		if !errors.Is(kubeguard.Stale(err), guard.ErrNotMinted) || time.Since(start) > time.Minute {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBreakGlassLowersFence: a fence raised too high is lowered without
// deleting the object, by an update carrying the break-glass annotation
// with the current fence, from a user RBAC lets lower fences; the same
// update from a user without that permission, or with another fence than
// the current one, is refused.
func TestBreakGlassLowersFence(t *testing.T) {
	srv := kubetest.Shared(t)
	install(t, srv)
	ns, user := labelled(t, srv, "fenced")
	waitInForce(t, srv.Admin, ns)
	ctx := context.Background()
	// The user may write ConfigMaps, and (below) lower fences.
	grant(t, srv, ns, "configmaps", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update", "patch"}})
	userCMs := user.CoreV1().ConfigMaps(ns)
	if _, err := srv.Admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap("target", 7, "holder-7"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := fenceAnnotation(ctx, srv.Admin, ns, "target", poison); err != nil { // no mint check here
		t.Fatal(err)
	}
	lower := func(c kubernetes.Interface, from string, to uint64) error {
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "target", metav1.GetOptions{})
		if err != nil {
			return err
		}
		kubeguard.Lower(cm, from, to)
		_, err = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) { // the user's Role is in force
		_, err := userCMs.Get(ctx, "target", metav1.GetOptions{})
		if err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatal(err)
		}
	}
	if err := lower(user, poison, 7); !errors.Is(kubeguard.Stale(err), guard.ErrStaleToken) {
		t.Fatalf("break-glass by a user who may not lower fences: %v, want a refusal", err)
	}
	grant(t, srv, ns, "lower-fences", rbacv1.PolicyRule{APIGroups: []string{"fencing-go.github.io"}, Resources: []string{"fences"}, Verbs: []string{"lower"}})
	start := time.Now()
	for { // the authorizer learns of the binding from its informer
		err := lower(user, poison, 7)
		if err == nil {
			break
		}
		if !errors.Is(kubeguard.Stale(err), guard.ErrStaleToken) || time.Since(start) > time.Minute {
			t.Fatalf("break-glass by a user who may lower fences: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := fenceOf(t, srv.Admin, ns, "target"); got != "7" {
		t.Fatalf("after the break-glass the fence is %q, want 7", got)
	}
	// Lowering from a fence that is no longer the object's: refused.
	if err := lower(user, poison, 3); !errors.Is(kubeguard.Stale(err), guard.ErrStaleToken) {
		t.Fatalf("break-glass from %s while the fence is 7: %v, want a refusal", poison, err)
	}
	// A holder's write as usual (Stamp drops the break-glass annotation),
	// then the fence dropped altogether.
	if _, err := userCMs.Update(ctx, configMap("target", 8, "holder-8"), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("holder 8 after the break-glass: %v", err)
	}
	if err := lower(user, "8", 0); err != nil {
		t.Fatalf("dropping the fence 8: %v", err)
	}
	if got := fenceOf(t, srv.Admin, ns, "target"); got != "" {
		t.Fatalf("after dropping the fence: %q", got)
	}
}

// grant gives kubetest.User the rule in ns.
func grant(t *testing.T, srv *kubetest.Server, ns, name string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}
	if _, err := srv.Admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: kubetest.User}},
	}
	if _, err := srv.Admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestMintCheckAfterReclaim: once kubebackend has reclaimed the key's
// Lease (WithRetention), the mint check has no Lease to read and refuses
// every write it matches, a forged token's included (and one without a
// token), and changes nothing; the
// key's next holder gets a token above the object's fence (the Lease is
// created again with a newer resourceVersion), which passes once the API
// server's cache has seen the grant.
func TestMintCheckAfterReclaim(t *testing.T) {
	srv := kubetest.Shared(t)
	ctx := context.Background()
	const key = "orders-reclaimed"
	const retention = time.Second
	ns, user, c, l := mintChecked(t, srv, "fenced-reclaim", "fencing-mint-reclaim-test", key, kubebackend.WithRetention(retention))
	cms := srv.Admin.CoreV1().ConfigMaps(ns)
	// The holder's first write passes once the policy is in force with
	// this namespace's Lease and its cache has seen the grant.
	passesOnceMinted(t, fmt.Sprint("create with the holder's token ", l.Token), func() error {
		_, err := cms.Create(ctx, configMap("target", l.Token, "holder-1"), metav1.CreateOptions{})
		return err
	})
	if err := c.Release(ctx, key, l.ID); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	for {
		_, err := user.CoordinationV1().Leases(ns).Get(ctx, kubebackend.LeaseName(key), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// The backend's bound is retention + retention/4 and a pass; a
		// minute is only where the test gives up.
		if time.Since(released) > time.Minute {
			t.Fatalf("the Lease is still there %v after its release, with a retention of %v", time.Since(released), retention)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the Lease was reclaimed %v after the release", time.Since(released).Round(time.Millisecond))
	// Every stamped write is refused now, however long the API server's
	// cache takes to see the delete: until then it holds the old Lease,
	// whose token the forged ones are above.
	for _, v := range []string{fmt.Sprint(l.Token + 1), poison} {
		err := fenceAnnotation(ctx, srv.Admin, ns, "target", v)
		if !errors.Is(kubeguard.Stale(err), guard.ErrNotMinted) {
			t.Fatalf("forged token %s after the key was reclaimed: %v, want a refusal wrapping guard.ErrNotMinted", v, err)
		}
		t.Logf("forged token %s refused: %v", v, err)
		if got := fenceOf(t, srv.Admin, ns, "target"); got != fmt.Sprint(l.Token) {
			t.Fatalf("after the forged patch the fence is %q, want %d", got, l.Token)
		}
	}
	// A write without a token too: the binding has no Lease to read.
	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unfenced"}}
	if _, err := cms.Create(ctx, plain, metav1.CreateOptions{}); !errors.Is(kubeguard.Stale(err), guard.ErrNotMinted) {
		t.Fatalf("a create without a token while the key is reclaimed: %v, want a refusal wrapping guard.ErrNotMinted", err)
	}
	next, err := c.Grant(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= l.Token {
		t.Fatalf("the next holder's token %d is not above %d, the key's before the reclaim", next.Token, l.Token)
	}
	passesOnceMinted(t, fmt.Sprint("the next holder's token ", next.Token), func() error {
		return fenceAnnotation(ctx, srv.Admin, ns, "target", fmt.Sprint(next.Token))
	})
}
