// Package etcdtest runs real etcd servers for tests: a single member, a
// restartable member on a kept data directory, or a 3-member cluster, each
// member a child process on random loopback ports with its data in a
// temporary directory, with fast elections (TickMs 10, ElectionMs 100:
// etcd's minimum lease TTL is then 1s).
//
// The etcd binary is the one $FENCING_ETCD names; without it the first test
// that needs it builds it (scripts/build-kube-binaries.sh etcd: etcd's
// server from its Go module in testimages/, cached in
// ~/.cache/fencing-test-bin), so go test needs nothing but Go. Restore runs
// etcdutl, $FENCING_ETCDUTL or built the same way.
//
// When ETCD_ENDPOINTS is set (comma separated), Client connects there instead
// of starting a server; tests that need to stop or restart a server still
// start their own.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencing-go/fencing/internal/testing/childproc"
)

// Timing of the servers.
const (
	TickMs     = 10
	ElectionMs = 100
	// MinTTL is etcd's minimum lease TTL with these settings:
	// ceil(3*electionTicks/2 * tick) = ceil(150ms) = 1s.
	MinTTL = time.Second
)

// startTimeout bounds a member's start-up (a process start and, in a
// cluster, an election), far above what it takes on a loaded machine.
const startTimeout = 2 * time.Minute

// Member is one etcd member, a child process. Its ports and data directory
// stay the same across Stop and Start.
type Member struct {
	// Name is the member's etcd name (m0, m1, ...).
	Name string
	// ClientURL is the member's client endpoint, http://127.0.0.1:port.
	ClientURL string

	peerURL string // advertised: the PeerProxy's URL when there is one
	listen  string // the peer URL the member listens on
	dir     string
	log     string // the process's output, across restarts
	fsync   bool
	cluster string // initial-cluster string
	started bool   // started at least once (data dir holds a member)

	// PeerProxy, when the cluster was started WithPeerProxies, is the proxy
	// in front of the member's peer URL, through which every other member
	// reaches it.
	PeerProxy *Proxy

	mu   sync.Mutex
	proc *childproc.Proc // nil when stopped
	id   string          // the running member's ID, hexadecimal
}

// Option configures a started member or cluster.
type Option func(*options)

type options struct{ fsync, peerProxies bool }

// WithPeerProxies puts a Proxy in front of each member's peer URL
// (Member.PeerProxy), so that a test can hold a member's raft traffic: see
// Cluster.Isolate.
func WithPeerProxies() Option { return func(o *options) { o.peerProxies = true } }

// WithFsync keeps fsync on (the default is --unsafe-no-fsync, for speed).
// Use it in tests that restart or kill a server and rely on what it wrote.
func WithFsync() Option { return func(o *options) { o.fsync = true } }

// Start starts a single member with a fresh temporary data directory and
// stops it in t's cleanup.
func Start(t testing.TB, opts ...Option) *Member {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	for attempt := 1; ; attempt++ {
		m := newMember(t, "m0", o.fsync)
		m.cluster = m.Name + "=" + m.peerURL
		t.Cleanup(m.Stop)
		err := m.Start()
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

func newMember(t testing.TB, name string, fsync bool) *Member {
	t.Helper()
	dir := t.TempDir()
	peer := "http://127.0.0.1:" + childproc.FreePort(t)
	return &Member{
		Name:      name,
		ClientURL: "http://127.0.0.1:" + childproc.FreePort(t),
		peerURL:   peer,
		listen:    peer,
		dir:       filepath.Join(dir, "data"),
		log:       filepath.Join(dir, "etcd.log"),
		fsync:     fsync,
	}
}

// The etcd and etcdutl binaries, found or built once per test process.
var (
	etcdBin    = sync.OnceValues(func() (string, error) { return childproc.Binary("etcd", "FENCING_ETCD") })
	etcdutlBin = sync.OnceValues(func() (string, error) { return childproc.Binary("etcdutl", "FENCING_ETCDUTL") })
)

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return *u
}

// Start starts (or restarts) the member's process on its data directory
// and waits until it serves. Starting a running member does nothing.
func (m *Member) Start() error {
	if err := m.start(); err != nil {
		return err
	}
	return m.waitReady()
}

// start starts the member's process, unless it is running.
func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		return nil
	}
	bin, err := etcdBin()
	if err != nil {
		return err
	}
	state := "new"
	if m.started {
		state = "existing"
	}
	args := []string{
		"--name=" + m.Name, "--data-dir=" + m.dir,
		"--heartbeat-interval=" + strconv.Itoa(TickMs), "--election-timeout=" + strconv.Itoa(ElectionMs),
		"--listen-client-urls=" + m.ClientURL, "--advertise-client-urls=" + m.ClientURL,
		"--listen-peer-urls=" + m.listen, "--initial-advertise-peer-urls=" + m.peerURL,
		"--initial-cluster=" + m.cluster, "--initial-cluster-token=etcdtest",
		"--initial-cluster-state=" + state, "--log-level=warn",
	}
	if !m.fsync {
		args = append(args, "--unsafe-no-fsync")
	}
	p, err := childproc.Start(exec.Command(bin, args...), m.log)
	if err != nil {
		return fmt.Errorf("start member %s: %w", m.Name, err)
	}
	m.proc = p
	m.id = ""
	m.started = true
	return nil
}

// waitReady waits for the member to serve (etcd's /health: it has a leader
// and answers a linearizable read) and learns its ID. A member whose process
// exited because one of its ports was taken returns an error wrapping
// syscall.EADDRINUSE.
func (m *Member) waitReady() error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return fmt.Errorf("member %s is stopped", m.Name)
	}
	if err := p.WaitHTTP(m.ClientURL+"/health", "", startTimeout); err != nil {
		log, _ := os.ReadFile(m.log)
		if strings.Contains(string(log), "address already in use") {
			err = fmt.Errorf("%w (%v)", syscall.EADDRINUSE, err)
		}
		return fmt.Errorf("member %s: %w; the end of its log:\n%s", m.Name, err, tail(log, 2000))
	}
	// Healthy, it answers its status; on a loaded host not always within
	// statusClient's second, so it is asked again until startTimeout.
	st, err := status(m.ClientURL)
	for deadline := time.Now().Add(startTimeout); err != nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		st, err = status(m.ClientURL)
	}
	if err != nil {
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	m.mu.Lock()
	if m.proc == p {
		m.id = strconv.FormatUint(st.Header.MemberID, 16)
	}
	m.mu.Unlock()
	return nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Stop stops the member's process (SIGTERM: etcd hands its leadership over
// and exits), keeping its data directory. Stopping a stopped member does
// nothing.
func (m *Member) Stop() {
	if p := m.detach(); p != nil {
		p.Stop()
	}
}

// Kill kills the member's process (SIGKILL: a crash; what it wrote without
// fsync may be lost, see WithFsync), keeping its data directory. Killing a
// stopped member does nothing.
func (m *Member) Kill() {
	if p := m.detach(); p != nil {
		p.Kill()
	}
}

// detach marks the member stopped and returns its process, or nil.
func (m *Member) detach() *childproc.Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	m.proc = nil
	m.id = ""
	return p
}

// Restart stops the member and starts it again on the same data directory
// and ports, then waits until it serves.
func (m *Member) Restart() error {
	m.Stop()
	return m.Start()
}

// IsLeader reports whether the member is running and sees itself as its
// cluster's leader (its own status, as etcdctl endpoint status shows it).
func (m *Member) IsLeader() bool {
	if !m.Running() {
		return false
	}
	st, err := status(m.ClientURL)
	return err == nil && st.Leader == st.Header.MemberID
}

// ID returns the running member's etcd member ID in hexadecimal (as peer
// requests name their sender), or "" when it is stopped.
func (m *Member) ID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id
}

// Running reports whether the member's process is started and has not
// exited.
func (m *Member) Running() bool {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.Exited():
		return false
	default:
		return true
	}
}

// Endpoints returns the member's client endpoint as a slice.
func (m *Member) Endpoints() []string { return []string{m.ClientURL} }

// Cluster is a set of members that form one etcd cluster.
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
		m := newMember(t, fmt.Sprintf("m%d", i), o.fsync)
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
	// A member is ready only once a quorum runs: start them all, then wait.
	for _, m := range c.Members {
		if err := m.start(); err != nil {
			return c, err
		}
	}
	for _, m := range c.Members {
		if err := m.waitReady(); err != nil {
			return c, err
		}
	}
	return c, nil
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
// starts a member for t and returns its endpoint.
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
