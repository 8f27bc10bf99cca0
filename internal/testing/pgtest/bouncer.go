package pgtest

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/serverproc"
)

// Bouncer is a PgBouncer in transaction pooling mode in front of a Server,
// a child process of the test.
type Bouncer struct {
	port int
	proc *serverproc.Proc // nil once stopped
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
	b := &Bouncer{}
	t.Cleanup(b.Stop)
	if err := serverproc.OnFreePort(3, func(port int) error { return b.start(bin, dir, cred, s.port, port, cfg) }); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return b
}

// start runs pgbouncer on port in front of the server on pgPort.
func (b *Bouncer) start(bin, dir string, cred *syscall.Credential, pgPort, port int, cfg BouncerConfig) error {
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
		return err
	}
	cmd := exec.Command(bin, conf)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	p, err := serverproc.Start(cmd)
	if err != nil {
		return err
	}
	b.port = port
	db, err := sql.Open("pgx", b.DSN())
	if err != nil {
		p.Stop(syscall.SIGKILL, 0)
		return err
	}
	defer db.Close()
	// Ready when a query through it reaches the server.
	if err := p.WaitReady(startTimeout, func() error { return ping(db) }); err != nil {
		return err
	}
	b.proc = p
	return nil
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
	p := b.proc
	b.proc = nil
	p.Stop(syscall.SIGINT, stopTimeout)
}
