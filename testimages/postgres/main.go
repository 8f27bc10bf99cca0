// Command docker-entrypoint starts PostgreSQL the way the official postgres
// image's docker-entrypoint.sh does with POSTGRES_HOST_AUTH_METHOD=trust,
// for the local test image fencing-test/postgres (see
// scripts/build-test-images.sh): on the first start it runs initdb in
// $PGDATA (superuser postgres, UTF8, locale C) and lets every host in with
// trust authentication; then it runs postgres listening on every address,
// with the command's options ("postgres -c fsync=on", or just "-c
// fsync=on").
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

const bin = "/usr/lib/postgresql/15/bin"

func main() {
	data := os.Getenv("PGDATA")
	if data == "" {
		data = "/var/lib/postgresql/data"
	}
	args := os.Args[1:]
	switch {
	case len(args) == 0:
	case args[0] == "postgres" || args[0] == filepath.Join(bin, "postgres"):
		args = args[1:]
	case strings.HasPrefix(args[0], "-"):
	default: // another command: run it as given
		path, err := exec.LookPath(args[0])
		if err != nil {
			fail(err)
		}
		fail(syscall.Exec(path, args, os.Environ()))
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); os.IsNotExist(err) {
		initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C")
		initdb.Stdout, initdb.Stderr = os.Stderr, os.Stderr
		if err := initdb.Run(); err != nil {
			fail(fmt.Errorf("initdb: %w", err))
		}
		hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			fail(err)
		}
		_, err = hba.WriteString("host all all 0.0.0.0/0 trust\nhost all all ::/0 trust\nhost replication all 0.0.0.0/0 trust\n")
		if err == nil {
			err = hba.Close()
		}
		if err != nil {
			fail(err)
		}
	}
	argv := append([]string{"postgres", "-D", data, "-c", "listen_addresses=*", "-k", "/tmp"}, args...)
	fail(syscall.Exec(filepath.Join(bin, "postgres"), argv, os.Environ()))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "docker-entrypoint:", err)
	os.Exit(1)
}
