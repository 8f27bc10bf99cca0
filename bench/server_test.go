package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/internal/testing/serverproc"
)

// serverAddr is the address of the redis-server every test and benchmark in
// this package uses, set once by TestMain; empty when none could be started.
var serverAddr string

// serverErr says why serverAddr is empty.
var serverErr error

// TestMain starts the package's redis-server. With sqliteHandoffEnv set,
// the binary is the waiter process of sqliteHandoff instead, with
// soakChildEnv the holder process of TestSoak.
func TestMain(m *testing.M) {
	if dir := os.Getenv(sqliteHandoffEnv); dir != "" {
		os.Exit(sqliteHandoffChild(dir))
	}
	if os.Getenv(soakChildEnv) != "" {
		os.Exit(soakChildMain())
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		serverAddr = addr
		return m.Run()
	}
	srv, err := startServer()
	if err != nil {
		serverErr = err
		return m.Run()
	}
	defer srv.stop()
	serverAddr = srv.addr
	return m.Run()
}

// newClient returns a client of the shared server, or skips tb (fails it in
// CI) when there is no server.
func newClient(tb testing.TB) *redis.Client {
	tb.Helper()
	if serverAddr == "" {
		msg := fmt.Sprintf("no redis-server: %v (install redis-server or set REDIS_ADDR)", serverErr)
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	// ContextTimeoutEnabled, as docs/timeouts.md advises: a request's
	// context then bounds its socket reads, and redisbackend needs no
	// goroutine per request to keep its request timeout. Every contender
	// shares this client.
	return dialClient(tb, &redis.Options{Addr: serverAddr, ContextTimeoutEnabled: true})
}

// newDefaultClient is newClient with go-redis's defaults, as most users
// build it: no ContextTimeoutEnabled, so the backend bounds its requests
// itself (redisbackend's batcher.detachFor).
func newDefaultClient(tb testing.TB) *redis.Client {
	tb.Helper()
	newClient(tb) // skips or fails without a server
	return dialClient(tb, &redis.Options{Addr: serverAddr})
}

// dialClient returns a client with o, closed when tb ends, that answered
// a PING.
func dialClient(tb testing.TB, o *redis.Options) *redis.Client {
	tb.Helper()
	c := redis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("ping %s: %v", serverAddr, err)
	}
	return c
}

// server is a redis-server child process in its own temporary directory.
type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan error
}

// startServer starts redis-server on a free loopback port and waits until
// it answers. It runs as a production server for fencing would: an
// append-only file, fsynced every second, no RDB snapshots.
func startServer() (*server, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // the free port may be taken before the server binds it
		s, err := tryStart(path)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func tryStart(path string) (*server, error) {
	port, err := serverproc.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencing-bench-redis-")
	if err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan error, 1)}
	s.cmd = exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
		"--daemonize", "no", "--logfile", "")
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var log strings.Builder
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if log.Len() < 8<<10 && !signalled {
				log.WriteString(line + "\n")
			}
			if !signalled && strings.Contains(line, "Ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
		s.done <- s.cmd.Wait()
	}()
	select {
	case <-ready:
		return s, nil
	case err := <-s.done:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server exited: %v\n%s", err, log.String())
	case <-time.After(10 * time.Second):
		s.stop()
		return nil, errors.New("redis-server did not become ready in 10s")
	}
}

// stop kills the server by its PID and removes its directory.
func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
	os.RemoveAll(s.dir)
}
