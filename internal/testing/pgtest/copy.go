package pgtest

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// CopyDatabase copies the postgres database of from into the postgres
// database of to, as a logical copy does (pg_dump piped into psql): the
// tables with their rows, the functions, nothing of the cluster itself.
func CopyDatabase(t testing.TB, from, to *Server) {
	t.Helper()
	dump := exec.Command(filepath.Join(from.bin, "pg_dump"), "-h", "127.0.0.1", "-p", strconv.Itoa(from.port), "-U", "postgres", "postgres")
	dump.Dir = from.dir
	dump.SysProcAttr = &syscall.SysProcAttr{Credential: from.cred}
	var stderr bytes.Buffer
	dump.Stderr = &stderr
	out, err := dump.Output()
	if err != nil {
		t.Fatalf("pgtest: pg_dump: %v\n%s", err, stderr.String())
	}
	restore := exec.Command(filepath.Join(to.bin, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(to.port), "-U", "postgres",
		"-v", "ON_ERROR_STOP=1", "-q", "postgres")
	restore.Stdin = bytes.NewReader(out)
	if out, err := run(restore, to.dir, to.cred); err != nil {
		t.Fatalf("pgtest: psql (restore): %v\n%s", err, out)
	}
}
