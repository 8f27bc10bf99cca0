package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/mysqltest"
)

// On MariaDB, a hold in one shell excludes a hold in another, get in a
// third sees its lease; the DSN comes from FENCING_MYSQL_DSN as from
// --mysql-dsn.
func TestMySQLHoldAcrossShells(t *testing.T) {
	srv := mysqltest.Start(t)
	dsn := fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", srv.Port(), mysqltest.Database)
	first := start(t, "hold", "jobs/nightly", "--ttl", "5s", "--backend", "mysql", "--mysql-dsn", dsn,
		"--", "sh", "-c", `echo "token $FENCING_TOKEN"; sleep 30`)
	var token string
	select {
	case line := <-first.lines:
		if !strings.HasPrefix(line, "token ") {
			t.Fatalf("first hold printed %q", line)
		}
		token = strings.TrimPrefix(line, "token ")
	case <-time.After(30 * time.Second):
		t.Fatal("the first hold did not start its command")
	}
	r := want(t, 3, "hold", "jobs/nightly", "--ttl", "5s", "--mysql-dsn", dsn, "--", "true")
	if !strings.Contains(r.stderr, "held") {
		t.Errorf("second hold: %v", r)
	}
	cmd := exec.Command(binary, "get", "jobs/nightly", "--json")
	cmd.Env = append(cleanEnv(), "FENCING_MYSQL_DSN="+dsn)
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"live":true`) || !strings.Contains(string(out), `"token":`+token) {
		t.Errorf("get with FENCING_MYSQL_DSN: %v\n%s; want the live lease, token %s", err, out, token)
	}
}

// A password in --mysql-dsn is refused before anything is sent.
func TestMySQLDSNPasswordNotInFlags(t *testing.T) {
	r := runBin(t, "get", "k", "--mysql-dsn", "u:secret@tcp(127.0.0.1:1)/db")
	if r.code != exitUsage || !strings.Contains(r.stderr, "MYSQL_PWD") || strings.Contains(r.stderr, "secret") {
		t.Errorf("--mysql-dsn with a password: %v; want exit 2 pointing to MYSQL_PWD, without the password", r)
	}
	r = runBin(t, "get", "k", "--backend", "mysql")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--mysql-dsn") {
		t.Errorf("--backend mysql without a DSN: %v", r)
	}
}
