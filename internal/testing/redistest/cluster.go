package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/internal/testing/serverproc"
)

// clusterSlots is the number of hash slots in a Redis Cluster.
const clusterSlots = 16384

// Cluster is a local Redis Cluster of three masters and no replicas, each a
// Server (a redis-server child process on a free loopback port with its own
// data directory and cluster bus port). It is stopped when the test ends.
type Cluster struct {
	// Masters are the cluster's nodes; Masters[i] owns the i-th third of
	// the hash slots.
	Masters []*Server
}

// StartCluster starts a three-master Redis Cluster, assigns each master a
// contiguous third of the hash slots, joins them and waits until every node
// reports cluster_state:ok. Every node runs as cfg says (persistence, Args);
// cfg.Dir and cfg.Port must be empty. It needs Redis 7 or later (for
// --cluster-port). Like Start, it skips the test without redis-server, or
// fails it in CI.
func StartCluster(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Dir != "" || cfg.Port != 0 {
		t.Fatalf("redistest: StartCluster: cfg.Dir and cfg.Port must be empty")
	}
	const masters = 3
	c := &Cluster{}
	busPorts := make([]string, masters)
	for i := range masters {
		// The bus port is not port+10000 (which may be taken or out of
		// range), so each node gets a free one of its own.
		bus, err := serverproc.FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		busPorts[i] = strconv.Itoa(bus)
		node := cfg
		node.Args = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", busPorts[i],
			"--cluster-node-timeout", "5000",
		}, cfg.Args...)
		c.Masters = append(c.Masters, Start(t, node))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.create(ctx, busPorts); err != nil {
		t.Fatalf("redistest: create cluster: %v", err)
	}
	return c
}

// Addrs returns the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Client returns a new cluster client, closed when the test ends. Each opts
// function may adjust the options first.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, f := range opts {
		f(o)
	}
	client := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// create does what `redis-cli --cluster create --cluster-replicas 0` does,
// without needing redis-cli: it splits the slots into contiguous ranges, one
// per master, joins the masters with CLUSTER MEET and waits until every node
// sees the whole cluster.
func (c *Cluster) create(ctx context.Context, busPorts []string) error {
	clients := make([]*redis.Client, len(c.Masters))
	for i, m := range c.Masters {
		clients[i] = redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer clients[i].Close()
	}
	for i, cl := range clients {
		lo := i * clusterSlots / len(clients)
		hi := (i+1)*clusterSlots/len(clients) - 1
		slots := make([]int, 0, hi-lo+1)
		for s := lo; s <= hi; s++ {
			slots = append(slots, s)
		}
		if err := cl.ClusterAddSlots(ctx, slots...).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTS %d-%d: %w", c.Masters[i].Addr(), lo, hi, err)
		}
	}
	for i, m := range c.Masters[1:] {
		err := clients[0].Do(ctx, "cluster", "meet", "127.0.0.1", m.Port(), busPorts[i+1]).Err()
		if err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", m.Addr(), err)
		}
	}
	for i, cl := range clients {
		if err := waitClusterOK(ctx, cl, len(clients)); err != nil {
			return fmt.Errorf("%s: %w", c.Masters[i].Addr(), err)
		}
	}
	return nil
}

// waitClusterOK polls CLUSTER INFO until the node knows all nodes and all
// slots and reports cluster_state:ok. A new master waits about two seconds
// before it turns ok.
func waitClusterOK(ctx context.Context, cl *redis.Client, nodes int) error {
	want := []string{
		"cluster_state:ok",
		fmt.Sprintf("cluster_slots_assigned:%d", clusterSlots),
		fmt.Sprintf("cluster_known_nodes:%d", nodes),
	}
	var info string
	for {
		var err error
		info, err = cl.ClusterInfo(ctx).Result()
		if err == nil && hasLines(info, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ok: %w; last CLUSTER INFO:\n%s", ctx.Err(), info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// hasLines reports whether every line of want is a line of info.
func hasLines(info string, want []string) bool {
	have := make(map[string]bool)
	for line := range strings.Lines(info) {
		have[strings.TrimSpace(line)] = true
	}
	for _, l := range want {
		if !have[l] {
			return false
		}
	}
	return true
}
