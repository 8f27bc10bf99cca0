// Package etcdtest runs real etcd servers for tests: an embedded single
// member, a restartable member on a kept data directory, or a 3-member
// cluster, all in the test process on random loopback ports, with fast
// elections (TickMs 10, ElectionMs 100: etcd's minimum lease TTL is then 1s).
//
// When ETCD_ENDPOINTS is set (comma separated), Client connects there instead
// of starting a server; tests that need to stop or restart a server still
// start their own.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Timing of the embedded servers.
const (
	TickMs     = 10
	ElectionMs = 100
	// MinTTL is etcd's minimum lease TTL with these settings:
	// ceil(3*electionTicks/2 * tick) = ceil(150ms) = 1s.
	MinTTL = time.Second
)

const startTimeout = 20 * time.Second

// Member is one embedded etcd member. Its ports and data directory stay the
// same across Stop and Start.
type Member struct {
	// Name is the member's etcd name (m0, m1, ...).
	Name string
	// ClientURL is the member's client endpoint, http://127.0.0.1:port.
	ClientURL string

	peerURL string // advertised: the PeerProxy's URL when there is one
	listen  string // the peer URL the member listens on
	dir     string
	fsync   bool
	cluster string // initial-cluster string
	started bool   // started at least once (data dir holds a member)

	// PeerProxy, when the cluster was started WithPeerProxies, is the proxy
	// in front of the member's peer URL, through which every other member
	// reaches it.
	PeerProxy *Proxy

	mu sync.Mutex
	e  *embed.Etcd
}

// Option configures a started member or cluster.
type Option func(*options)

type options struct{ fsync, peerProxies bool }

// WithPeerProxies puts a Proxy in front of each member's peer URL
// (Member.PeerProxy), so that a test can hold a member's raft traffic: see
// Cluster.Isolate.
func WithPeerProxies() Option { return func(o *options) { o.peerProxies = true } }

// WithFsync keeps fsync on (the default is UnsafeNoFsync, for speed). Use it
// in tests that restart a server and rely on what it wrote.
func WithFsync() Option { return func(o *options) { o.fsync = true } }

// Start starts a single embedded member with a fresh temporary data
// directory and stops it in t's cleanup.
func Start(t testing.TB, opts ...Option) *Member {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	for attempt := 1; ; attempt++ {
		m := newMember(t, "m0", t.TempDir(), o.fsync)
		m.cluster = m.Name + "=" + m.peerURL
		t.Cleanup(m.Stop)
		err := m.Start()
		if err == nil {
			err = m.waitReady()
		}
		if err == nil {
			return m
		}
		if attempt == bindAttempts || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("etcdtest: %v", err)
		}
		m.Stop() // a port free a moment ago was taken since: others, anew
	}
}

// bindAttempts is how many times a new member or cluster is started on
// fresh ports when one of the ports it picked was taken in between (by
// another test process: go test runs packages in parallel).
const bindAttempts = 3

func newMember(t testing.TB, name, dir string, fsync bool) *Member {
	t.Helper()
	peer := "http://" + freeAddr(t)
	return &Member{
		Name:      name,
		ClientURL: "http://" + freeAddr(t),
		peerURL:   peer,
		listen:    peer,
		dir:       dir,
		fsync:     fsync,
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return *u
}

// Start starts (or restarts) the member on its data directory and waits
// until it serves. Starting a running member does nothing.
func (m *Member) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		return nil
	}
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.dir
	cfg.TickMs = TickMs
	cfg.ElectionMs = ElectionMs
	cfg.UnsafeNoFsync = !m.fsync
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls = []url.URL{mustURL(m.ClientURL)}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenPeerUrls = []url.URL{mustURL(m.listen)}
	cfg.AdvertisePeerUrls = []url.URL{mustURL(m.peerURL)}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = m.cluster
	cfg.InitialClusterToken = "etcdtest"
	cfg.ClusterState = embed.ClusterStateFlagNew
	if m.started {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start member %s: %w", m.Name, err)
	}
	m.e = e
	m.started = true
	return nil
}

// waitReady waits for the member to have joined its cluster.
func (m *Member) waitReady() error {
	m.mu.Lock()
	e := m.e
	m.mu.Unlock()
	if e == nil {
		return fmt.Errorf("member %s is stopped", m.Name)
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("member %s: %w", m.Name, err)
	case <-time.After(startTimeout):
		e.Close()
		return fmt.Errorf("member %s not ready after %v", m.Name, startTimeout)
	}
}

// Stop stops the member, keeping its data directory. Stopping a stopped
// member does nothing.
func (m *Member) Stop() {
	m.mu.Lock()
	e := m.e
	m.e = nil
	m.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Restart stops the member and starts it again on the same data directory
// and ports, then waits until it serves.
func (m *Member) Restart() error {
	m.Stop()
	if err := m.Start(); err != nil {
		return err
	}
	return m.waitReady()
}

// IsLeader reports whether the member is running and is its cluster's leader.
func (m *Member) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID()
}

// ID returns the running member's etcd member ID in hexadecimal (as peer
// requests name their sender), or "" when it is stopped.
func (m *Member) ID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return ""
	}
	return m.e.Server.MemberID().String()
}

// Running reports whether the member is started.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil
}

// Endpoints returns the member's client endpoint as a slice.
func (m *Member) Endpoints() []string { return []string{m.ClientURL} }

// Cluster is a set of embedded members that form one etcd cluster.
type Cluster struct {
	// Members are the cluster's members, in the order they were made.
	Members []*Member
}

// StartCluster starts an n-member cluster, waits until it has a leader and
// stops it in t's cleanup.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	for attempt := 1; ; attempt++ {
		c, err := startCluster(t, n, o)
		if err == nil {
			return c
		}
		c.Stop()
		if attempt == bindAttempts || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("etcdtest: %v", err)
		}
	}
}

// startCluster makes and starts an n-member cluster on fresh ports.
func startCluster(t testing.TB, n int, o options) (*Cluster, error) {
	c := &Cluster{}
	var parts []string
	for i := range n {
		m := newMember(t, fmt.Sprintf("m%d", i), t.TempDir(), o.fsync)
		if o.peerProxies {
			m.PeerProxy = StartProxy(t, m.listen)
			m.peerURL = m.PeerProxy.URL
		}
		c.Members = append(c.Members, m)
		parts = append(parts, m.Name+"="+m.peerURL)
	}
	for _, m := range c.Members {
		m.cluster = strings.Join(parts, ",")
	}
	t.Cleanup(c.Stop)
	// Members block in StartEtcd until they see their peers' listeners, so
	// start them concurrently.
	errs := make(chan error, n)
	for _, m := range c.Members {
		go func() {
			if err := m.Start(); err != nil {
				errs <- err
				return
			}
			errs <- m.waitReady()
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return c, first
}

// Endpoints returns every member's client endpoint.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Leader returns the running member that is the leader, or nil.
func (c *Cluster) Leader() *Member {
	for _, m := range c.Members {
		if m.IsLeader() {
			return m
		}
	}
	return nil
}

// WaitLeader waits until some running member is the leader and returns it.
func (c *Cluster) WaitLeader(ctx context.Context) (*Member, error) {
	for {
		if m := c.Leader(); m != nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcdtest: no leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Isolate cuts m off from the other members of a cluster started
// WithPeerProxies, keeping every connection open: the other members' raft
// messages to it and its messages to them are held (in the proxies) until
// Heal. Its clients still reach it; it falls behind, and a read it answers
// from its own state alone is stale.
func (c *Cluster) Isolate(m *Member) {
	id := m.ID()
	for _, o := range c.Members {
		if o == m {
			o.PeerProxy.SetMode(Pause)
		} else {
			o.PeerProxy.PauseFrom(id)
		}
	}
}

// Heal undoes Isolate.
func (c *Cluster) Heal(m *Member) {
	id := m.ID()
	for _, o := range c.Members {
		if o == m {
			o.PeerProxy.SetMode(Forward)
		} else {
			o.PeerProxy.ResumeFrom(id)
		}
	}
}

// Stop stops every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Stop()
	}
}

// NewClient returns a client of endpoints, with a silent logger, closed in
// t's cleanup.
func NewClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Endpoints returns the endpoints in ETCD_ENDPOINTS when set, and otherwise
// starts an embedded member for t and returns its endpoint.
func Endpoints(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv("ETCD_ENDPOINTS"); env != "" {
		return strings.Split(env, ",")
	}
	return Start(t).Endpoints()
}

// Client returns a client of Endpoints(t).
func Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return NewClient(t, Endpoints(t))
}
