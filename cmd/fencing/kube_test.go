package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// TestKube runs the command with --backend kube against a real
// kube-apiserver and etcd (skipped without them, except in CI), as a user
// whose only permission is the Role on leases of docs/kubernetes.md, named
// by a kubeconfig whose context gives the namespace.
func TestKube(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	srv := kubetest.Start(t)
	ns, user := srv.Namespace(t)
	kubeconfig := writeKubeconfig(t, srv.API.URL, srv.API.Config(true).BearerToken, ns)
	// kube puts the backend's flags right after the subcommand: after
	// hold's "--" they would be the command's arguments.
	kube := func(args ...string) []string {
		return append([]string{args[0], "--backend", "kube", "--kubeconfig", kubeconfig}, args[1:]...)
	}

	t.Run("Hold", func(t *testing.T) {
		r := want(t, 0, kube("hold", "jobs/a", "--ttl", "5s", "--", "sh", "-c", `echo "$FENCING_KEY $FENCING_TOKEN"`)...)
		key, tok, _ := strings.Cut(strings.TrimSpace(r.stdout), " ")
		first, err := strconv.ParseUint(tok, 10, 64)
		if key != "jobs/a" || err != nil || first == 0 {
			t.Fatalf("the command saw %q, want FENCING_KEY=jobs/a and a token", r.stdout)
		}
		// The Lease is in the kubeconfig context's namespace, released.
		l, err := user.CoordinationV1().Leases(ns).Get(context.Background(), kubebackend.LeaseName("jobs/a"), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the Lease of jobs/a in %s: %v", ns, err)
		}
		if h := l.Spec.HolderIdentity; h != nil && *h != "" {
			t.Errorf("after hold the Lease still has holder %q", *h)
		}
		// The next hold gets a larger token, and the command's exit
		// status is hold's.
		r = want(t, 7, kube("hold", "jobs/a", "--ttl", "5s", "--", "sh", "-c", `echo "$FENCING_TOKEN"; exit 7`)...)
		if next, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64); err != nil || next <= first {
			t.Errorf("second hold: token %q after %d, want a larger one", r.stdout, first)
		}
	})

	t.Run("Flow", func(t *testing.T) {
		var l leaseJSON
		wantJSON(t, &l, kube("grant", "flow", "--ttl", "10s", "--json")...)
		if l.Token == 0 || l.LeaseID == "" {
			t.Fatalf("grant: %+v", l)
		}
		if r := want(t, exitHeld, kube("grant", "flow", "--ttl", "10s")...); !strings.Contains(r.stderr, "held") {
			t.Errorf("held grant: %v", r)
		}
		var st stateJSON
		wantJSON(t, &st, kube("get", "flow", "--json")...)
		if !st.Live || st.Token != l.Token {
			t.Errorf("get after grant: %+v, lease %+v", st, l)
		}
		want(t, 0, kube("release", "flow", "--lease-id", l.LeaseID)...)
		wantJSON(t, &st, kube("get", "flow", "--json")...)
		if st.Live {
			t.Errorf("get after release: %+v", st)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		// A namespace where the user has no Role: refused, never
		// "unreachable".
		r := want(t, exitAuth, kube("get", "k", "--kube-namespace", "kube-system")...)
		if !strings.Contains(r.stderr, "permission denied") || strings.Contains(r.stderr, "unreachable") {
			t.Errorf("a namespace without the Role: %v", r)
		}
		bad := writeKubeconfig(t, srv.API.URL, "no-such-token", ns)
		r = want(t, exitAuth, "get", "k", "--backend", "kube", "--kubeconfig", bad)
		if !strings.Contains(r.stderr, "authentication failed") {
			t.Errorf("an unknown token: %v", r)
		}
		r = want(t, exitUsage, "get", "k", "--backend", "kube", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
		if !strings.Contains(r.stderr, "kubeconfig") {
			t.Errorf("a missing kubeconfig: %v", r)
		}
	})
}

// writeKubeconfig writes a kubeconfig whose current context reaches server
// with token, in namespace ns, and returns its path.
func writeKubeconfig(t *testing.T, server, token, ns string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: ns}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
