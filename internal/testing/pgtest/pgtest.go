// Package pgtest runs real PostgreSQL servers for tests.
//
// Start runs initdb in a new temporary directory and then postgres as a
// child process on a free loopback port, waits until it accepts
// connections, and stops it in the test's cleanup by its PID. The server
// keeps nothing safe (fsync off): it is for tests only.
//
// The binaries are found in $PG_BIN, else in the newest
// /usr/lib/postgresql/*/bin (Debian's postgresql package), else on PATH.
// initdb and postgres refuse to run as root, so when the test runs as root
// both run as the postgres system user (or $PGTEST_USER), in a directory
// that user owns.
//
// When no PostgreSQL is found, Start skips the test, except in CI (the CI
// environment variable is set), where a missing server is a failure.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/fencing-go/fencing/internal/testing/serverproc"
)

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 15 * time.Second
)

// Server is a running PostgreSQL server, a child process of the test.
type Server struct {
	dir     string // owned by the server's user: data/, the socket, the log
	port    int
	durable bool     // fsync on (Config.Durable)
	archive bool     // WAL archived into ArchiveDir (Config.Archive)
	env     []string // Config.Env
	set     []string // Config.Settings
	bin     string
	cred    *syscall.Credential

	proc *serverproc.Proc // nil once stopped
}

// missing skips t, or fails it in CI.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("pgtest: PostgreSQL is required in CI: %s", msg)
	}
	t.Skipf("pgtest: %s (install Debian's postgresql package or set PG_BIN)", msg)
}

// BinDir returns the directory holding initdb and postgres, or skips t (fails
// it in CI) when there is none.
func BinDir(t testing.TB) string {
	t.Helper()
	var dirs []string
	if d := os.Getenv("PG_BIN"); d != "" {
		dirs = []string{d}
	} else {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
		dirs = found
		if p, err := exec.LookPath("initdb"); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	missing(t, "no initdb and postgres found in %v", dirs)
	return ""
}

// version reads the major version from /usr/lib/postgresql/<v>/bin.
func version(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// runAs returns the credential to run the server with (nil: as we are) and
// the user's uid and gid.
func runAs(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	name := os.Getenv("PGTEST_USER")
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		missing(t, "running as root, and PostgreSQL refuses root, but there is no user %q to run it as: %v", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || uid == 0 {
		t.Fatalf("pgtest: user %q has uid %q, gid %q: not a non-root user", name, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

// Start initialises a database cluster in a new temporary directory, runs
// postgres on a free loopback port and stops it (and removes the directory)
// when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartConfig(t, Config{})
}

// Config changes how StartConfig runs the server.
type Config struct {
	// Durable keeps PostgreSQL's defaults fsync and full_page_writes on,
	// for tests of what survives a crash. Without it the server keeps
	// nothing safe, for speed (synchronous_commit stays on: the backend
	// refuses to grant in a session without it).
	Durable bool
	// Archive turns on WAL archiving (archive_mode) into a directory of
	// the server's, for point-in-time recovery (StartRecovery).
	Archive bool
	// Env is added to the postgres process's environment (not initdb's):
	// for example faketime.Clock's Env, to run the server on a clock of
	// the test's.
	Env []string
	// Settings are server settings, each "name=value", passed to postgres
	// as -c name=value after pgtest's own (a later one wins): for example
	// "shared_preload_libraries=pg_stat_statements".
	Settings []string
}

// StartConfig is Start with a Config.
func StartConfig(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin := BinDir(t)
	cred := runAs(t)
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	s := &Server{dir: dir, durable: cfg.Durable, archive: cfg.Archive, env: cfg.Env, set: cfg.Settings, bin: bin, cred: cred}
	initdb := exec.Command(filepath.Join(bin, "initdb"),
		"-D", s.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := run(initdb, dir, cred); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	if cfg.Archive {
		err := os.Mkdir(s.ArchiveDir(), 0o700)
		if err == nil && cred != nil {
			err = os.Chown(s.ArchiveDir(), int(cred.Uid), int(cred.Gid))
		}
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	t.Cleanup(s.Stop)
	if err := s.startOnFreePort(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// startOnFreePort starts s on a free port.
func (s *Server) startOnFreePort() error {
	return serverproc.OnFreePort(3, func(port int) error { s.port = port; return s.start(s.bin, s.cred) })
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

func run(cmd *exec.Cmd, dir string, cred *syscall.Credential) ([]byte, error) {
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd.CombinedOutput()
}

func (s *Server) start(bin string, cred *syscall.Credential) error {
	args := []string{
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-k", s.dir, // the Unix socket, in our own directory
		"-c", "listen_addresses=127.0.0.1",
	}
	if s.archive {
		args = append(args, "-c", "archive_mode=on", "-c", "archive_command=cp %p "+s.ArchiveDir()+"/%f")
	}
	if !s.durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	for _, kv := range s.set {
		args = append(args, "-c", kv)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	db, err := sql.Open("pgx", s.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := serverproc.Start(cmd)
	if err != nil {
		return err
	}
	if err := p.WaitReady(startTimeout, func() error { return ping(db) }); err != nil {
		return err
	}
	s.proc = p
	return nil
}

// ping pings db, bounded by a second.
func ping(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// DSN returns a connection URL for the server's postgres database, as the
// postgres superuser (trust authentication, no TLS).
func (s *Server) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// PID returns the postmaster's process ID, or 0 once stopped.
func (s *Server) PID() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.PID()
}

// DB opens the server's postgres database with pgx's database/sql adapter
// and closes it when t ends.
func (s *Server) DB(t testing.TB) *sql.DB {
	t.Helper()
	return openDB(t, s.DSN())
}

// openDB opens dsn with pgx's database/sql adapter and closes it when t
// ends.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Stop shuts the server down by its PID (SIGINT, PostgreSQL's fast
// shutdown: it ends open sessions) and waits for it to exit, killing it if
// it takes longer than 15 seconds. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.signal(syscall.SIGINT) }

// signal stops the server with sig (see serverproc.Proc.Stop).
func (s *Server) signal(sig syscall.Signal) {
	p := s.proc
	s.proc = nil
	p.Stop(sig, stopTimeout)
}

// RequirePassword creates role, a login role with password, and makes the
// server ask every role but postgres for its password (scram-sha-256) on
// TCP, as a production server does.
func (s *Server) RequirePassword(t testing.TB, role, password string) {
	t.Helper()
	db := s.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password)); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	hba := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(s.dataDir(), "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// The postmaster reloads when it gets to it: wait until a login
	// without the password is refused.
	without, err := sql.Open("pgx", fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", role, s.port))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer without.Close()
	for without.PingContext(ctx) == nil {
		select {
		case <-ctx.Done():
			t.Fatalf("pgtest: the server still lets %s in without a password", role)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
