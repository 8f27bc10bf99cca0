// Package mysqltest runs real MariaDB servers for tests.
//
// Start copies a data directory made once by mariadb-install-db (kept in
// the user's cache directory, one per mariadbd binary) into a new
// temporary directory, runs mariadbd on it as a child process on a free
// loopback port, waits until it accepts connections, and stops it in the
// test's cleanup by its PID. Every server has its own data directory,
// socket and port, so tests that start servers run in parallel.
//
// mariadbd is found in $MARIADB_BIN, else in /usr/sbin (Debian's
// mariadb-server package), else on PATH. When none is found, Start skips
// the test, except in CI (the CI environment variable is set), where a
// missing server is a failure.
package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver

	"github.com/fencing-go/fencing/internal/testing/serverproc"
)

const (
	startTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
)

// Database is the database every server has, empty, for the tests' tables.
const Database = "fencing"

// Server is a running MariaDB server, a child process of the test.
type Server struct {
	dir  string // data/, the socket, the error log
	port int
	bin  string
	cfg  Config

	proc *serverproc.Proc // nil once stopped
}

// Config changes how StartConfig runs the server.
type Config struct {
	// Durable keeps MariaDB's defaults: every commit flushed and synced
	// (innodb_flush_log_at_trx_commit=1, fsync on), for tests of what
	// survives a crash. Without it the server syncs nothing (the setting
	// stays 1, which the backend checks, but InnoDB's flush method is
	// nosync), for speed.
	Durable bool
	// Args are added to mariadbd's command line.
	Args []string
	// Env is added to mariadbd's environment: for example faketime.Clock's
	// Env, to run the server on a clock of the test's.
	Env []string
}

// missing skips t, or fails it in CI.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("mysqltest: MariaDB is required in CI: %s", msg)
	}
	t.Skipf("mysqltest: %s (install Debian's mariadb-server package or set MARIADB_BIN)", msg)
}

// binDir returns the directory holding mariadbd, or skips t (fails it in
// CI) when there is none.
func binDir(t testing.TB) string {
	t.Helper()
	dirs := []string{"/usr/sbin"}
	if d := os.Getenv("MARIADB_BIN"); d != "" {
		dirs = []string{d}
	} else if p, err := exec.LookPath("mariadbd"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if fi, err := os.Stat(filepath.Join(d, "mariadbd")); err == nil && fi.Mode()&0o111 != 0 {
			return d
		}
	}
	missing(t, "no mariadbd found in %v", dirs)
	return ""
}

// Start runs a server with the default Config.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartConfig(t, Config{})
}

// StartConfig copies the template data directory into a new temporary
// directory, runs mariadbd on it on a free loopback port and stops it
// (and removes the directory) when t ends.
func StartConfig(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin := binDir(t)
	tmpl, err := template(bin)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	dir, err := os.MkdirTemp("", "mysqltest-")
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &Server{dir: dir, bin: bin, cfg: cfg}
	if out, err := exec.Command("cp", "-a", tmpl, s.dataDir()).CombinedOutput(); err != nil {
		t.Fatalf("mysqltest: copy the template data directory: %v\n%s", err, out)
	}
	t.Cleanup(s.Stop)
	if err := serverproc.OnFreePort(3, func(port int) error { s.port = port; return s.start() }); err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	return s
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// template returns the data directory that mariadb-install-db made for
// bin's mariadbd, making it first if there is none: in the user's cache
// directory, named after the binary's size and time, built in a temporary
// directory and renamed into place, so concurrent test processes each
// find a whole one.
func template(bin string) (string, error) {
	fi, err := os.Stat(filepath.Join(bin, "mariadbd"))
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	root := filepath.Join(cache, "fencing-test", "mariadb")
	dir := filepath.Join(root, fmt.Sprintf("data-%d-%d", fi.Size(), fi.ModTime().Unix()))
	if _, err := os.Stat(filepath.Join(dir, "mysql")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(root, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	// With normal authentication, root may log in from 127.0.0.1 without
	// a password. The extra file makes the tests' database.
	extra := filepath.Join(work, "extra.sql")
	sqlText := "CREATE DATABASE " + Database + ";\n"
	if err := os.WriteFile(extra, []byte(sqlText), 0o644); err != nil {
		return "", err
	}
	install := filepath.Join(bin, "mariadb-install-db")
	if _, err := os.Stat(install); err != nil {
		install = "mariadb-install-db" // Debian puts it in /usr/bin
	}
	data := filepath.Join(work, "data")
	args := []string{"--no-defaults", "--auth-root-authentication-method=normal", "--datadir=" + data,
		"--skip-test-db", "--skip-name-resolve", "--extra-file=" + extra, "--innodb-log-file-size=8M"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(install, args...)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	if err := os.Rename(data, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "mysql")); serr == nil {
			return dir, nil // another process made it meanwhile
		}
		return "", err
	}
	return dir, nil
}

// Args returns mariadbd's command line.
func (s *Server) Args() []string {
	args := []string{
		"--no-defaults",
		"--datadir=" + s.dataDir(),
		"--socket=" + filepath.Join(s.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(s.dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(s.dir, "error.log"),
		"--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=8M",
		"--max-connections=500",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	if !s.cfg.Durable {
		args = append(args, "--innodb-flush-method=nosync", "--innodb-doublewrite=0")
	}
	return append(args, s.cfg.Args...)
}

func (s *Server) start() error {
	cmd := exec.Command(filepath.Join(s.bin, "mariadbd"), s.Args()...)
	cmd.Dir = s.dir
	if len(s.cfg.Env) > 0 {
		cmd.Env = append(os.Environ(), s.cfg.Env...)
	}
	db, err := sql.Open("mysql", s.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := serverproc.Start(cmd)
	if err != nil {
		return err
	}
	err = p.WaitReady(startTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return db.PingContext(ctx)
	})
	if err != nil {
		return fmt.Errorf("%w%s", err, s.errorLog())
	}
	s.proc = p
	return nil
}

func (s *Server) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
	return string(b)
}

// DSN returns a go-sql-driver/mysql data source name for the server's
// database Database, as root (no password) over TCP, with the parameters
// the backend's documentation recommends (interpolateParams: one round
// trip per statement).
func (s *Server) DSN() string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?interpolateParams=true", s.port, Database)
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// PID returns mariadbd's process ID, or 0 once stopped.
func (s *Server) PID() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.PID()
}

// DB opens the server's database and closes it when t ends.
func (s *Server) DB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", s.DSN())
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Stop shuts the server down by its PID (SIGTERM: a clean shutdown) and
// waits for it to exit, killing it if it takes longer than stopTimeout.
// Stopping a stopped server does nothing.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// Crash kills the server (SIGKILL, as kill -9): nothing is flushed, and the
// next start runs InnoDB's crash recovery from the redo log.
func (s *Server) Crash() { s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) {
	p := s.proc
	s.proc = nil
	p.Stop(sig, stopTimeout)
}

// Restart starts a stopped or crashed server again on the same port and
// data directory, and waits until it accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.proc != nil {
		t.Fatalf("mysqltest: Restart of a running server")
	}
	if err := s.start(); err != nil {
		t.Fatalf("mysqltest: restart: %v", err)
	}
}
