package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Bouncer is a PgBouncer in transaction pooling mode in front of a Server,
// a child process of the test.
type Bouncer struct {
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// StartBouncer runs Debian's pgbouncer (or $PGBOUNCER) on a free loopback
// port in transaction pooling mode, with at most poolSize server
// connections and server_login_retry = 1 (see BouncerConfig), in front of
// s's postgres database, and stops it by its PID
// when t ends. Without pgbouncer it skips t, except in CI, where it fails.
func StartBouncer(t testing.TB, s *Server, poolSize int) *Bouncer {
	t.Helper()
	return StartBouncerConfig(t, s, BouncerConfig{PoolSize: poolSize})
}

// BouncerConfig changes how StartBouncerConfig runs PgBouncer.
type BouncerConfig struct {
	PoolSize int // default_pool_size: the most server connections
	// ServerLoginRetry is how long PgBouncer waits after a failed login
	// to the server before it tries again (server_login_retry, whole
	// seconds; PgBouncer's default is 15s). Zero means one second.
	ServerLoginRetry time.Duration
}

// StartBouncerConfig is StartBouncer with a BouncerConfig.
func StartBouncerConfig(t testing.TB, s *Server, cfg BouncerConfig) *Bouncer {
	t.Helper()
	if cfg.ServerLoginRetry == 0 {
		cfg.ServerLoginRetry = time.Second
	}
	bin := os.Getenv("PGBOUNCER")
	if bin == "" {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
			if isExec(p) {
				bin = p
				break
			}
		}
		if bin == "" {
			if p, err := exec.LookPath("pgbouncer"); err == nil {
				bin = p
			}
		}
	}
	if bin == "" {
		msg := "no pgbouncer found (install Debian's pgbouncer package or set PGBOUNCER)"
		if os.Getenv("CI") != "" {
			t.Fatalf("pgtest: pgbouncer is required in CI: %s", msg)
		}
		t.Skipf("pgtest: %s", msg)
	}
	cred := runAs(t)
	dir := filepath.Join(s.dir, "bouncer-"+strconv.Itoa(s.port))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		b, err := startBouncer(bin, dir, cred, s.port, port, cfg)
		if err == nil {
			t.Cleanup(b.Stop)
			return b
		}
		if attempt == 2 {
			t.Fatalf("pgtest: %v", err)
		}
	}
}

func startBouncer(bin, dir string, cred *syscall.Credential, pgPort, port int, cfg BouncerConfig) (*Bouncer, error) {
	ini := fmt.Sprintf(`[databases]
postgres = host=127.0.0.1 port=%d dbname=postgres user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = %d
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
server_login_retry = %d
`, pgPort, port, cfg.PoolSize, int(cfg.ServerLoginRetry.Seconds()))
	conf := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, conf)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	b := &Bouncer{port: port, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(b.done)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-b.done:
			return nil, fmt.Errorf("pgbouncer exited during start-up (%s):\n%s", cmd.ProcessState, log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Stop()
			return nil, fmt.Errorf("pgbouncer on port %d not ready within %v\n%s", port, startTimeout, log.String())
		}
	}
	db, err := sql.Open("pgx", b.DSN())
	if err != nil {
		b.Stop()
		return nil, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		b.Stop()
		return nil, fmt.Errorf("through pgbouncer: %w\n%s", err, log.String())
	}
	return b, nil
}

// DSN returns a connection URL through the pooler. It sets pgx's
// default_query_exec_mode=exec: PgBouncer before 1.21 cannot keep the named
// prepared statements pgx caches by default.
func (b *Bouncer) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&default_query_exec_mode=exec", b.port)
}

// DB opens the pooled database with pgx's database/sql adapter and closes
// it when t ends.
func (b *Bouncer) DB(t testing.TB) *sql.DB {
	t.Helper()
	return openDB(t, b.DSN())
}

// Stop stops pgbouncer by its PID (SIGINT) and waits for it.
func (b *Bouncer) Stop() {
	if b.cmd == nil {
		return
	}
	cmd := b.cmd
	b.cmd = nil
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-b.done:
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-b.done
	}
}
