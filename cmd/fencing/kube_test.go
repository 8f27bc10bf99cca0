package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// TestKube runs the command with --backend kube against a real
// kube-apiserver and etcd (found or built by kubetest.Binaries), as a user
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

	t.Run("RetriedGrant", func(t *testing.T) {
		// A lease abandoned (granted, never released nor renewed): a
		// grant retried in a shell loop, a new process each time, gets
		// the key one ttl + margin after it was first seen, not never.
		const ttl, margin = 2 * time.Second, 500 * time.Millisecond
		start := time.Now()
		var l leaseJSON
		wantJSON(t, &l, kube("grant", "abandoned", "--ttl", ttl.String(), "--margin", margin.String(), "--json")...)
		// get says what this host saw, across processes: the second
		// get's time unchanged counts from the first's (or earlier).
		first := want(t, 0, kube("get", "abandoned")...)
		firstEnd := time.Now()
		time.Sleep(time.Second)
		secondStart := time.Now()
		second := want(t, 0, kube("get", "abandoned")...)
		for _, r := range []result{first, second} {
			if !strings.Contains(r.stdout, "as observed from this host") || strings.Contains(r.stdout, "expires:") {
				t.Fatalf("get of a live kube lease: %q, want the time unchanged as observed from this host", r.stdout)
			}
		}
		if d := unchangedFor(t, second.stdout); d < secondStart.Sub(firstEnd) {
			t.Errorf("second get: unchanged for %v, want at least the %v between the two gets\n%s", d, secondStart.Sub(firstEnd), second.stdout)
		}
		tryStart := time.Now()
		var longest time.Duration
		const pause = 200 * time.Millisecond
		for {
			t0 := time.Now()
			r := runBin(t, kube("grant", "abandoned", "--ttl", ttl.String(), "--margin", margin.String(), "--json")...)
			longest = max(longest, time.Since(t0))
			if r.code == 0 {
				if end := time.Since(start); end < ttl+margin {
					t.Fatalf("granted %v after the abandoned grant was sent, before its ttl + margin %v", end, ttl+margin)
				}
				// The grant that succeeded started within ttl + margin
				// of the first try, plus one pause and one try.
				if late := t0.Sub(tryStart); late > ttl+margin+pause+longest {
					t.Errorf("the retried grant got the key %v after its first try, want at most ttl + margin + a pause + the longest try (%v)", late, ttl+margin+pause+longest)
				}
				t.Logf("granted on a try %v after the first (%v after the abandoned grant); longest try %v", t0.Sub(tryStart), t0.Sub(start), longest)
				return
			}
			if r.code != exitHeld {
				t.Fatalf("retried grant: %v", r)
			}
			if time.Since(tryStart) > 4*(ttl+margin)+10*longest {
				t.Fatalf("the retried grant never got the abandoned key in %v (ttl + margin %v): every new process starts observing afresh", time.Since(tryStart), ttl+margin)
			}
			time.Sleep(pause)
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

// unchangedFor reads the "unchanged: for D" line of get's output.
func unchangedFor(t *testing.T, out string) time.Duration {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "unchanged:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 2 && f[0] == "for" {
				if d, err := time.ParseDuration(f[1]); err == nil {
					return d
				}
			}
		}
	}
	t.Fatalf("no \"unchanged: for D\" line in %q", out)
	return 0
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
