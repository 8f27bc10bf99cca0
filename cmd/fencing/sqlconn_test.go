package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two hold invocations on the default backend (the per-user SQLite file)
// exclude each other, and get in a third process sees the lease.
func TestDefaultSQLiteExcludesAcrossProcesses(t *testing.T) {
	first := start(t, "hold", "jobs/nightly", "--ttl", "5s", "--", "sh", "-c", `echo "token $FENCING_TOKEN"; sleep 30`)
	select {
	case line := <-first.lines:
		if !strings.HasPrefix(line, "token ") {
			t.Fatalf("first hold printed %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first hold did not start its command")
	}
	r := want(t, 3, "hold", "jobs/nightly", "--ttl", "5s", "--", "true")
	if !strings.Contains(r.stderr, "held") {
		t.Errorf("second hold: %v", r)
	}
	var st struct {
		Live  bool   `json:"live"`
		Token uint64 `json:"token"`
	}
	wantJSON(t, &st, "get", "jobs/nightly", "--json")
	if !st.Live || st.Token == 0 {
		t.Errorf("get in a third process: %+v, want the live lease", st)
	}
	dir := filepath.Join(os.Getenv("XDG_STATE_HOME"), "fencing")
	for path, mode := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "fencing.db"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want mode %v", path, fi.Mode().Perm(), err, mode)
		}
	}
}

// --sqlite-path and FENCING_SQLITE_PATH choose the file.
func TestSQLitePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	want(t, 0, "grant", "k", "--ttl", "1m", "--backend", "sqlite", "--sqlite-path", path)
	want(t, 3, "grant", "k", "--ttl", "1m", "--sqlite-path", path)
	want(t, 0, "grant", "k", "--ttl", "1m") // the default file is another
	cmd := exec.Command(binary, "grant", "k", "--ttl", "1m")
	cmd.Env = append(cleanEnv(), "FENCING_SQLITE_PATH="+path)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Errorf("grant with FENCING_SQLITE_PATH on a held key: %v\n%s; want exit 3", err, out)
	}
	// A file that is not SQLite is an error naming it.
	junk := filepath.Join(t.TempDir(), "junk.db")
	os.WriteFile(junk, []byte(strings.Repeat("not a database ", 100)), 0o600)
	r := runBin(t, "get", "k", "--sqlite-path", junk)
	if r.code == 0 || !strings.Contains(r.stderr, junk) {
		t.Errorf("get on a file that is not SQLite: %v", r)
	}
}

// A password in --postgres-dsn is refused before anything is sent.
func TestPostgresDSNPasswordNotInFlags(t *testing.T) {
	for _, dsn := range []string{"postgres://u:secret@127.0.0.1:1/db", "host=127.0.0.1 port=1 user=u password=secret"} {
		r := runBin(t, "get", "k", "--postgres-dsn", dsn)
		if r.code != exitUsage || !strings.Contains(r.stderr, "PGPASSWORD") || strings.Contains(r.stderr, "secret") {
			t.Errorf("--postgres-dsn %q: %v; want exit 2 pointing to PGPASSWORD, without the password", dsn, r)
		}
	}
	r := runBin(t, "get", "k", "--backend", "postgres")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--postgres-dsn") {
		t.Errorf("--backend postgres without a DSN: %v", r)
	}
}
