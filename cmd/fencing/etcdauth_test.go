package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// TestEtcdAuth: with etcd authentication on, a wrong or missing password
// is exit 6 "authentication failed", not "server unreachable"; the right
// one works.
func TestEtcdAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	m := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, m.Endpoints())
	ctx := context.Background()
	if _, err := cli.UserAdd(ctx, "root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	for _, creds := range [][]string{{"--etcd-user", "root", "--etcd-password", "wrong"}, nil} {
		r := runBin(t, append([]string{"get", "k", "--etcd-endpoints", m.ClientURL}, creds...)...)
		if r.code != exitAuth || !strings.Contains(r.stderr, "authentication failed") || strings.Contains(r.stderr, "unreachable") {
			t.Errorf("etcd credentials %q: want exit 6 and authentication failed, got %v", creds, r)
		}
	}
	want(t, 0, "get", "k", "--etcd-endpoints", m.ClientURL, "--etcd-user", "root", "--etcd-password", "rootpw")
}
