package natstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is three nats-servers with JetStream routed to each other on
// loopback, each a child process with its own store directory (see
// StartCluster).
type Cluster struct {
	// Servers are the members, named n1, n2 and n3.
	Servers []*Server
}

// ClusterOption configures StartCluster.
type ClusterOption func(*clusterOptions)

type clusterOptions struct{ defaultSync bool }

// WithDefaultSync runs the servers with JetStream's default sync_interval
// (a sync to disk every 2 minutes) in place of sync_interval: always.
func WithDefaultSync() ClusterOption {
	return func(o *clusterOptions) { o.defaultSync = true }
}

// StartCluster starts a 3-server JetStream cluster, each server with a
// fresh store directory and jetstream { sync_interval: always } (see
// WithDefaultSync), waits until every member serves, and stops them in t's
// cleanup.
func StartCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	var o clusterOptions
	for _, opt := range opts {
		opt(&o)
	}
	return &Cluster{Servers: start(t, 3, !o.defaultSync)}
}

// URLs are the members' client URLs, comma-separated, as nats.Connect
// takes them.
func (c *Cluster) URLs() string {
	us := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		us[i] = s.URL
	}
	return strings.Join(us, ",")
}

// Connect returns a connection to the cluster (any member, reconnecting to
// another for ever), closed in t's cleanup, and its JetStream.
func (c *Cluster) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connect(t, c.URLs())
}

// Bucket creates a key-value bucket as the package's Bucket does, with a
// replica on every member (R3).
func (c *Cluster) Bucket(t testing.TB, js jetstream.JetStream) string {
	t.Helper()
	return bucket(t, js, len(c.Servers))
}

// Kill kills member i with SIGKILL (a crash), keeping its store.
func (c *Cluster) Kill(i int) { c.Servers[i].Kill() }

// ConnectTo is Connect with member i first: the connection goes to it
// while it runs, and to the others in order when it is gone.
func (c *Cluster) ConnectTo(t testing.TB, i int) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	urls := []string{c.Servers[i].URL}
	for j, s := range c.Servers {
		if j != i {
			urls = append(urls, s.URL)
		}
	}
	return connect(t, strings.Join(urls, ","), nats.DontRandomize())
}

// Restart starts members is again (every member when is is empty) on
// their stores, and waits until they all serve. Every one is started
// before any is waited for: a member is healthy only once JetStream has a
// quorum of its peers.
func (c *Cluster) Restart(is ...int) error {
	if len(is) == 0 {
		for i := range c.Servers {
			is = append(is, i)
		}
	}
	errs := make([]error, len(c.Servers))
	for _, i := range is {
		errs[i] = c.Servers[i].spawn()
	}
	var wg sync.WaitGroup
	for _, i := range is {
		if errs[i] == nil {
			wg.Go(func() { errs[i] = c.Servers[i].wait() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Freeze stops member i with SIGSTOP: it holds its connections and answers
// nothing until Thaw.
func (c *Cluster) Freeze(i int) error { return c.Servers[i].signal(syscall.SIGSTOP) }

// Thaw continues member i with SIGCONT.
func (c *Cluster) Thaw(i int) error { return c.Servers[i].signal(syscall.SIGCONT) }

// signal sends sig to the server's process.
func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("natstest: nats-server %s is not running", s.Name)
	}
	return p.Process().Signal(sig)
}

// Leader returns the index in Servers of the leader of stream's raft group
// (a bucket's stream is KV_<bucket>), as the JetStream API's STREAM.INFO
// tells it through js, or an error when no member answers with a leader
// before ctx ends.
func (c *Cluster) Leader(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return -1, fmt.Errorf("natstest: stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return -1, fmt.Errorf("natstest: stream %s has no leader", stream)
	}
	for i, srv := range c.Servers {
		if srv.Name == info.Cluster.Leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("natstest: stream %s: leader %q is not a member", stream, info.Cluster.Leader)
}

// WaitLeader polls Leader until stream has a leader other than member not
// (-1: any member), and returns it, or the last error when ctx ends.
func (c *Cluster) WaitLeader(ctx context.Context, js jetstream.JetStream, stream string, not int) (int, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		i, err := c.Leader(rctx, js, stream)
		cancel()
		if err == nil && i == not {
			err = fmt.Errorf("natstest: stream %s: the leader is still %s", stream, c.Servers[i].Name)
		}
		if err == nil {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, errors.Join(err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
