package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots in a Redis Cluster.
const clusterSlots = 16384

// Cluster is a local Redis Cluster of three masters and no replicas, each a
// redis-server child process on a free loopback port with its own temporary
// directory. It is stopped in the test's cleanup.
type Cluster struct {
	// Addrs are the masters' host:port addresses.
	Addrs []string
	nodes []*proc
}

// StartCluster starts a three-master Redis Cluster, assigns each master a
// third of the hash slots, joins them and waits until every node reports
// cluster_state:ok. Without redis-server it skips tb, or fails it when the
// environment variable CI is set.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	const masters = 3
	c := &Cluster{}
	for range masters {
		n := startProc(tb, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			"--cluster-require-full-coverage", "yes")
		c.nodes = append(c.nodes, n)
		c.Addrs = append(c.Addrs, n.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.create(ctx); err != nil {
		tb.Fatalf("redistest: create cluster: %v", err)
	}
	return c
}

// NewClient returns a cluster client of c, closed in tb's cleanup.
func (c *Cluster) NewClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	tb.Cleanup(func() { client.Close() })
	return client
}

// create splits the slots into contiguous ranges, one per master, joins the
// masters with CLUSTER MEET and waits until every node sees the whole
// cluster. It does what `redis-cli --cluster create` does, without needing
// redis-cli.
func (c *Cluster) create(ctx context.Context) error {
	clients := make([]*redis.Client, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.addr})
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
			return fmt.Errorf("%s: CLUSTER ADDSLOTS %d-%d: %w", c.nodes[i].addr, lo, hi, err)
		}
	}
	for _, n := range c.nodes[1:] {
		// The bus port is not port+10000, so MEET names it.
		if err := clients[0].Do(ctx, "cluster", "meet", n.host, n.port, n.busPort).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", n.addr, err)
		}
	}
	for i, cl := range clients {
		if err := waitClusterOK(ctx, cl, len(clients)); err != nil {
			return fmt.Errorf("%s: %w", c.nodes[i].addr, err)
		}
	}
	return nil
}

// waitClusterOK polls CLUSTER INFO until the node knows all nodes and all
// slots and reports cluster_state:ok.
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
		if err == nil && containsAll(info, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ok: %w; last CLUSTER INFO:\n%s", ctx.Err(), info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func containsAll(info string, lines []string) bool {
	have := make(map[string]bool)
	for line := range strings.Lines(info) {
		have[strings.TrimSpace(line)] = true
	}
	for _, l := range lines {
		if !have[l] {
			return false
		}
	}
	return true
}

// proc is a redis-server child process. (Temporary: replaced by the helpers
// of redistest.go once they land.)
type proc struct {
	host, port, addr string
	busPort          string // cluster bus port, when cluster-enabled
	cmd              *exec.Cmd
	done             chan struct{}
}

// startProc starts redis-server with args on a free loopback port in a
// temporary directory, waits until it answers PING and kills it in tb's
// cleanup. A cluster node also gets a free cluster bus port.
func startProc(tb testing.TB, args ...string) *proc {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		msg := fmt.Sprintf("redistest: redis-server not found: %v", err)
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	var lastErr error
	for range 5 { // a free port may be taken before the server binds it
		n, err := tryStartProc(tb, path, args)
		if err == nil {
			return n
		}
		lastErr = err
	}
	tb.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

func tryStartProc(tb testing.TB, path string, args []string) (*proc, error) {
	port, err := pickLoopbackPort()
	if err != nil {
		return nil, err
	}
	dir := tb.TempDir()
	full := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log")}
	n := &proc{host: "127.0.0.1", port: strconv.Itoa(port), done: make(chan struct{})}
	if slices.Contains(args, "--cluster-enabled") {
		bus, err := pickLoopbackPort()
		if err != nil {
			return nil, err
		}
		n.busPort = strconv.Itoa(bus)
		full = append(full, "--cluster-port", n.busPort)
	}
	full = append(full, args...)
	n.addr = net.JoinHostPort(n.host, n.port)
	n.cmd = exec.Command(path, full...)
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { n.cmd.Wait(); close(n.done) }()
	tb.Cleanup(n.kill)
	c := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return n, nil
		}
		select {
		case <-n.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("redis-server exited: %v\n%s", n.cmd.ProcessState, log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer PING: %v", n.addr, err)
		}
	}
}

// kill stops the process by its PID and waits for it to exit.
func (n *proc) kill() {
	_ = n.cmd.Process.Kill()
	<-n.done
}

func pickLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
