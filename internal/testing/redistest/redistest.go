// Package redistest runs real redis-server processes for tests.
//
// Start launches redis-server (found on PATH, or at $REDIS_SERVER) as a
// child process on a free loopback port with its own data directory, waits
// until it answers PING, and stops it by its PID when the test ends. A
// Server can be killed with SIGKILL and restarted on the same port and
// directory, which is how tests show what survives a crash.
//
// When no redis-server binary is found, Start skips the test, except in CI
// (the CI environment variable is set), where a missing server is a failure.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/internal/testing/serverproc"
)

// startTimeout bounds how long Start and Restart wait for PING to succeed
// (including loading an append-only file).
const startTimeout = 20 * time.Second

// Config says how to run a server. The zero value is a server without any
// persistence (--save "" --appendonly no).
type Config struct {
	// AppendOnly turns on the append-only file (--appendonly yes).
	AppendOnly bool
	// AppendFsync is the AOF fsync policy when AppendOnly is set: "always"
	// (the default here), "everysec" or "no".
	AppendFsync string
	// Args are further command-line arguments, such as
	// []string{"--maxmemory-policy", "allkeys-lru"}.
	Args []string
	// Dir is the data directory. Empty means a new t.TempDir().
	Dir string
	// Port is the TCP port on 127.0.0.1. Zero picks a free one.
	Port int
	// Env are further environment variables (KEY=value) for the server
	// process, such as an LD_PRELOAD (see ClockShim).
	Env []string
}

// Server is a running (or killed) redis-server child process.
type Server struct {
	t    testing.TB
	bin  string
	cfg  Config
	dir  string
	port int

	// sentinel, when set, makes the process a Sentinel monitoring it.
	sentinel *sentinelConfig

	mu   sync.Mutex
	proc *serverproc.Proc // nil once killed
}

type sentinelConfig struct {
	masterName string
	primary    *Server
}

// Binary returns the path of the redis-server binary: $REDIS_SERVER if set,
// else redis-server on PATH. When there is none it skips the test, or fails
// it when the CI environment variable is set.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redistest: redis-server is required in CI but was not found: %v", err)
		}
		t.Skipf("redistest: redis-server not found on PATH (install Redis 7 or set REDIS_SERVER): %v", err)
	}
	return p
}

// Start runs a redis-server as cfg says and stops it when t ends.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	return start(t, &Server{t: t, bin: Binary(t), cfg: cfg, dir: cfg.Dir, port: cfg.Port})
}

// StartSentinel runs a Sentinel (redis-server --sentinel) that monitors
// primary as masterName with a quorum of one, declares it down after one
// second without a reply and then fails over to one of its replicas. It
// stops when t ends. Connect with redis.NewFailoverClient and
// SentinelAddrs: []string{sentinel.Addr()}.
func StartSentinel(t testing.TB, masterName string, primary *Server) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), sentinel: &sentinelConfig{masterName: masterName, primary: primary}}
	return start(t, s)
}

func start(t testing.TB, s *Server) *Server {
	t.Helper()
	cfg := s.cfg
	if s.dir == "" {
		s.dir = t.TempDir()
	}
	t.Cleanup(s.Kill)
	var err error
	if cfg.Port != 0 {
		err = s.start() // a fixed port: retrying would not help
	} else {
		err = serverproc.OnFreePort(5, func(port int) error { s.port = port; return s.start() })
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

// Args returns the command-line arguments the server runs with.
func (s *Server) Args() []string {
	if s.sentinel != nil {
		return []string{filepath.Join(s.dir, "sentinel.conf"), "--sentinel"}
	}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--save", "",
		"--logfile", "redis.log",
	}
	if s.cfg.AppendOnly {
		fsync := s.cfg.AppendFsync
		if fsync == "" {
			fsync = "always"
		}
		args = append(args, "--appendonly", "yes", "--appendfsync", fsync)
	} else {
		args = append(args, "--appendonly", "no")
	}
	return append(args, s.cfg.Args...)
}

// writeSentinelConfig writes the Sentinel's configuration file, which
// Sentinel itself rewrites as it learns about replicas and failovers.
func (s *Server) writeSentinelConfig() error {
	sc := s.sentinel
	conf := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %q
logfile "redis.log"
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 10000
`, s.port, s.dir, sc.masterName, sc.primary.Port())
	return os.WriteFile(filepath.Join(s.dir, "sentinel.conf"), []byte(conf), 0o600)
}

func (s *Server) start() error {
	if s.sentinel != nil {
		if err := s.writeSentinelConfig(); err != nil {
			return err
		}
	}
	cmd := exec.Command(s.bin, s.Args()...)
	cmd.Dir = s.dir
	if len(s.cfg.Env) > 0 {
		cmd.Env = append(os.Environ(), s.cfg.Env...)
	}
	p, err := serverproc.Start(cmd)
	if err != nil {
		return err
	}
	if err := p.WaitReady(startTimeout, func() error { return ping(s.Addr()) }); err != nil {
		return fmt.Errorf("%w%s", err, s.logTail())
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// ping sends PING on a fresh connection and wants +PONG (not -LOADING).
// A server run with --requirepass answers -NOAUTH, which also means it is
// up.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH ") {
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nredis.log:\n" + string(b)
}

// Addr returns the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.dir }

// PID returns the process ID of the running server, or 0 after Kill.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.PID()
}

// Kill stops the server at once with SIGKILL, as a crash or power cut of
// the process would, and waits for it to exit. Killing a stopped server
// does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	p.Stop(syscall.SIGKILL, 0)
}

// Restart kills the server if it runs and starts it again with the same
// configuration, port and data directory, waiting until it has loaded its
// data and answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Client returns a new go-redis client for the server, closed when the
// test ends. Each opts function may adjust the options first.
func (s *Server) Client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Do runs one command on a fresh connection and returns its reply. It is
// for test set-up and inspection (CONFIG SET, HGET...).
func (s *Server) Do(ctx context.Context, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	return c.Do(ctx, args...).Result()
}
