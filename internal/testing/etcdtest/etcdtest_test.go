package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

func TestMinTTL(t *testing.T) {
	cli := etcdtest.NewClient(t, etcdtest.Start(t).Endpoints())
	resp, err := cli.Grant(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(resp.TTL) * time.Second; got != etcdtest.MinTTL {
		t.Fatalf("a 1s lease was granted %v, want etcdtest.MinTTL = %v", got, etcdtest.MinTTL)
	}
}

// TestRestartKeepsData: a member stopped (SIGTERM) or killed (SIGKILL) and
// started again serves what it wrote before, on the same endpoint.
func TestRestartKeepsData(t *testing.T) {
	for _, tc := range []struct {
		name string
		down func(*etcdtest.Member)
	}{{"Stop", (*etcdtest.Member).Stop}, {"Kill", (*etcdtest.Member).Kill}} {
		t.Run(tc.name, func(t *testing.T) {
			m := etcdtest.Start(t, etcdtest.WithFsync())
			cli := etcdtest.NewClient(t, m.Endpoints())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			put, err := cli.Put(ctx, "k", "v")
			if err != nil {
				t.Fatal(err)
			}
			tc.down(m)
			if m.Running() || m.ID() != "" {
				t.Fatalf("after %s: Running %v, ID %q; want false and \"\"", tc.name, m.Running(), m.ID())
			}
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			get, err := cli.Get(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v" || get.Header.Revision < put.Header.Revision {
				t.Fatalf("after %s and Start: %v at revision %d, want k=v at revision >= %d", tc.name, get.Kvs, get.Header.Revision, put.Header.Revision)
			}
		})
	}
}

func TestEndpointsFromEnv(t *testing.T) {
	m := etcdtest.Start(t)
	t.Setenv("ETCD_ENDPOINTS", m.ClientURL)
	eps := etcdtest.Endpoints(t)
	if len(eps) != 1 || eps[0] != m.ClientURL {
		t.Fatalf("Endpoints = %v, want the ETCD_ENDPOINTS server %s", eps, m.ClientURL)
	}
}

func TestClusterLeader(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Stop()
	next, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatal("the stopped member is still the leader")
	}
	cli := etcdtest.NewClient(t, c.Endpoints())
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put with the leader stopped: %v", err)
	}
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	if !leader.Running() {
		t.Fatal("restarted member is not running")
	}
}
