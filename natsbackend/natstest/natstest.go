// Package natstest runs real nats-server processes with JetStream for
// tests: each a child process on loopback ports with its store in a
// temporary directory and jetstream { sync_interval: always }, so that a
// kill -9 and a restart are real and lose nothing acknowledged. Start runs
// one server; StartCluster runs three routed to each other, for R3 buckets
// and for faults of one member (Kill, Restart, Freeze with SIGSTOP) or of
// all.
//
// The binary is the one $FENCING_NATS_SERVER names; without it the first
// test that needs it builds it (scripts/build-kube-binaries.sh nats-server:
// the server from its Go module in testimages/natsserver, cached in
// ~/.cache/fencing-test-bin by a hash of that module's files and the Go
// version), so go test needs nothing but Go. When it can be had neither
// way a test skips with a message, or fails when CI is set.
//
// It serves the tests of natsbackend and of the fencing command's
// --backend nats, which lives in a module of its own and so cannot import
// an internal package of this one.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/internal/testing/childproc"
)

// startTimeout bounds a server's start-up, far above what it takes on a
// loaded machine.
const startTimeout = 2 * time.Minute

// binary is the nats-server binary, found or built once per test binary.
var binary = sync.OnceValues(func() (string, error) {
	return childproc.Binary("nats-server", "FENCING_NATS_SERVER")
})

// Binary returns the path of nats-server (see the package doc), or skips
// t (fails it when CI is set) when it can be had neither way.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := binary()
	if err != nil {
		msg := fmt.Sprintf("nats-server: %v\n(build it with eval \"$(scripts/build-kube-binaries.sh nats-server)\", which sets FENCING_NATS_SERVER)", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// Server is one nats-server with JetStream, a child process. Its ports and
// store directory stay the same across Kill and Start.
type Server struct {
	// URL is the client URL, nats://127.0.0.1:port.
	URL string
	// Name is the server's name (server_name), as JetStream's cluster
	// information names it: n1, n2... in a cluster, n1 alone.
	Name string
	// Monitor is the monitoring endpoint, http://127.0.0.1:port (/varz,
	// /jsz, /healthz).
	Monitor string

	bin  string
	conf string
	log  string

	mu   sync.Mutex
	proc *childproc.Proc
}

// bindAttempts is how many times servers are started on fresh ports when
// one they picked was taken in between (go test runs packages in
// parallel).
const bindAttempts = 3

// Start starts a server with a fresh store directory, and stops it in t's
// cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, 1, true)[0]
}

// start starts n servers with fresh store directories (a cluster when n >
// 1: each routes to the others), synced on every write when always, and
// stops them in t's cleanup. It waits until every one serves.
func start(t testing.TB, n int, always bool) []*Server {
	t.Helper()
	bin := Binary(t)
	for attempt := 1; ; attempt++ {
		srvs, routes := make([]*Server, n), make([]string, n)
		confs := make([]string, n)
		for i := range n {
			dir := t.TempDir()
			port, mport := childproc.FreePort(t), childproc.FreePort(t)
			srvs[i] = &Server{
				URL:     "nats://127.0.0.1:" + port,
				Name:    fmt.Sprintf("n%d", i+1),
				bin:     bin,
				conf:    filepath.Join(dir, "nats.conf"),
				Monitor: "http://127.0.0.1:" + mport,
				log:     filepath.Join(dir, "nats.log"),
			}
			sync := "  sync_interval: always\n"
			if !always {
				sync = "" // the default: every 2 minutes
			}
			confs[i] = fmt.Sprintf("server_name: %s\nlisten: \"127.0.0.1:%s\"\nhttp: \"127.0.0.1:%s\"\n"+
				"jetstream {\n  store_dir: %q\n%s}\n", srvs[i].Name, port, mport, filepath.Join(dir, "store"), sync)
			if n > 1 {
				routes[i] = childproc.FreePort(t)
			}
		}
		for i, s := range srvs {
			conf := confs[i]
			if n > 1 {
				var rs []string
				for j, r := range routes {
					if j != i {
						rs = append(rs, fmt.Sprintf("nats-route://127.0.0.1:%s", r))
					}
				}
				conf += fmt.Sprintf("cluster {\n  name: fencing\n  listen: \"127.0.0.1:%s\"\n  routes: [%s]\n}\n", routes[i], strings.Join(rs, ", "))
			}
			if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Stop)
		}
		// Every server is started before any is waited for: a member of
		// a cluster is healthy only once JetStream has its peers.
		errs := make([]error, n)
		for i, s := range srvs {
			errs[i] = s.spawn()
		}
		var wg sync.WaitGroup
		for i, s := range srvs {
			if errs[i] == nil {
				wg.Go(func() { errs[i] = s.wait() })
			}
		}
		wg.Wait()
		err := errors.Join(errs...)
		if err == nil {
			return srvs
		}
		if attempt == bindAttempts || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("natstest: %v", err)
		}
		for _, s := range srvs {
			s.Stop()
		}
	}
}

// Start starts (or restarts) the server's process on its store directory
// and waits until JetStream serves (for a member of a cluster: until it
// has caught up with its peers). Starting a running server does nothing.
func (s *Server) Start() error {
	if err := s.spawn(); err != nil {
		return err
	}
	return s.wait()
}

// spawn starts the process unless it runs.
func (s *Server) spawn() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	p, err := childproc.Start(exec.Command(s.bin, "-c", s.conf), s.log)
	if err != nil {
		return fmt.Errorf("start nats-server: %w", err)
	}
	s.proc = p
	return nil
}

// wait waits until the running process serves.
func (s *Server) wait() error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("nats-server %s is not running", s.Name)
	}
	if err := p.WaitHTTP(s.Monitor+"/healthz", "", startTimeout); err != nil {
		log, _ := os.ReadFile(s.log)
		if strings.Contains(string(log), "address already in use") {
			err = fmt.Errorf("%w (%v)", syscall.EADDRINUSE, err)
		}
		return fmt.Errorf("nats-server %s: %w; the end of its log:\n%s", s.Name, err, tail(log, 2000))
	}
	return nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Stop stops the server (SIGTERM), keeping its store. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	if p := s.detach(); p != nil {
		p.Stop()
	}
}

// Kill kills the server (SIGKILL: a crash), keeping its store. Killing a
// stopped server does nothing.
func (s *Server) Kill() {
	if p := s.detach(); p != nil {
		p.Kill()
	}
}

func (s *Server) detach() *childproc.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	s.proc = nil
	return p
}

// Connect returns a connection to the server that reconnects for ever
// (a test restarts the server under it), closed in t's cleanup, and its
// JetStream.
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connect(t, s.URL)
}

// connect connects to urls (comma-separated) as Server.Connect does.
func connect(t testing.TB, urls string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Bucket creates a key-value bucket with a fresh name (file storage,
// history 1, one replica) and returns its name.
func Bucket(t testing.TB, js jetstream.JetStream) string {
	t.Helper()
	return bucket(t, js, 1)
}

// bucket creates a bucket of replicas replicas, as Bucket.
func bucket(t testing.TB, js jetstream.JetStream, replicas int) string {
	t.Helper()
	name := fmt.Sprintf("fencing_%d_%d", os.Getpid(), seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for retried := false; ; retried = true {
		actx, acancel := ctx, context.CancelFunc(func() {})
		if replicas > 1 {
			actx, acancel = context.WithTimeout(ctx, js.Options().DefaultTimeout)
		}
		_, err := js.CreateKeyValue(actx, jetstream.KeyValueConfig{Bucket: name, Storage: jetstream.FileStorage, Replicas: replicas})
		acancel()
		var api *jetstream.APIError
		switch {
		case err == nil:
			return name
		case ctx.Err() == nil && replicas > 1 && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &api) && (api.ErrorCode == errNoPeers || api.Code == 503)):
			// A cluster whose members are all healthy may have no
			// JetStream meta leader yet, and then no member answers
			// (each attempt is bounded by the client's default
			// timeout: a create bounded only by startTimeout once
			// failed with context deadline exceeded), or answers 503;
			// or not all its
			// members online in the meta group ("no suitable peers for
			// placement, peer offline", seen once in 16 starts). The
			// same configuration created again is no error.
			if !retried {
				t.Logf("natstest: create bucket %s: %v; trying again", name, err)
			}
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("natstest: create bucket %s: %v", name, err)
		}
	}
}

// errNoPeers is JetStream's error code for a stream it cannot place:
// fewer peers online than replicas.
const errNoPeers jetstream.ErrorCode = 10005

// seq numbers the buckets of one test binary.
var seq atomic.Int64

var (
	sharedMu sync.Mutex
	shared   *Server
	mainEnd  = &cleanups{}
)

// Shared returns the test binary's shared server, started on first use
// and stopped at the end of Main.
func Shared(t testing.TB) *Server {
	t.Helper()
	Binary(t) // skips or fails t, not the whole binary
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		mainEnd.TB = t
		shared = Start(mainEnd)
	}
	return shared
}

// Main runs the package's tests and then stops the shared server.
func Main(m *testing.M) {
	code := m.Run()
	sharedMu.Lock()
	for i := len(mainEnd.fns) - 1; i >= 0; i-- {
		mainEnd.fns[i]()
	}
	sharedMu.Unlock()
	os.Exit(code)
}

// cleanups is a testing.TB for the shared server, whose cleanups run at
// the end of Main.
type cleanups struct {
	testing.TB
	fns []func()
}

func (c *cleanups) Helper()                   {}
func (c *cleanups) Cleanup(f func())          { c.fns = append(c.fns, f) }
func (c *cleanups) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (c *cleanups) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }
func (c *cleanups) TempDir() string {
	d, err := os.MkdirTemp("", "natstest")
	if err != nil {
		panic(err)
	}
	c.fns = append(c.fns, func() { os.RemoveAll(d) })
	return d
}
