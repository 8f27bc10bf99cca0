package main

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/fencing-go/fencing/internal/testing/pgtest"
)

// A PostgreSQL server that refuses the password, or the role's permission
// to create the tables, is exit 6 and says so; one that does not answer is
// exit 5.
func TestPostgresExitCodes(t *testing.T) {
	srv := pgtest.StartConfig(t, pgtest.Config{Durable: true}) // passes New's safety checks
	srv.RequirePassword(t, "app", "right")
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	for _, c := range []struct {
		what, password string
		port, code     int
		says           string
	}{
		{"a wrong password", "wrong", srv.Port(), exitAuth, "authentication failed"},
		{"no password", "", srv.Port(), exitAuth, "authentication failed"},
		{"a closed port", "right", closedPort, exitUnreachable, "unreachable"},
		{"no CREATE on the schema", "right", srv.Port(), exitAuth, "permission denied"},
	} {
		cmd := exec.Command(binary, "get", "k", "--backend", "postgres",
			"--postgres-dsn", fmt.Sprintf("postgres://app@127.0.0.1:%d/postgres?sslmode=disable", c.port))
		cmd.Env = append(cleanEnv(), "PGPASSWORD="+c.password)
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != c.code || !strings.Contains(string(out), c.says) {
			t.Errorf("%s: %v\n%s; want exit %d saying %q", c.what, err, out, c.code, c.says)
		}
	}
}
