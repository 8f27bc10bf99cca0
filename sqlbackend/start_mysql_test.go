package sqlbackend_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// New refuses, with a *SafetyError naming the setting, a server that can
// lose a commit (innodb_flush_log_at_trx_commit 2, sync_binlog 0 with the
// binary log on), a replica (read_only), a session time zone with
// daylight saving, and a lease table that is not InnoDB; the start-up
// errors are told apart: a refused login, a closed port, a user without
// CREATE, a DSN without a database.
func TestMySQLStartChecks(t *testing.T) {
	ctx := context.Background()
	srv := mysqltest.StartConfig(t, mysqltest.Config{Args: []string{"--log-bin=binlog", "--sync-binlog=1"}})
	root := srv.DB(t)
	set := func(stmt string) {
		t.Helper()
		if _, err := root.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	base := fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", srv.Port(), mysqltest.Database)
	check := func(dsn string, opts ...sqlbackend.Option) error {
		db := openMySQL(t, dsn)
		db.SetMaxOpenConns(1)
		_, err := sqlbackend.New(context.Background(), db, sqlbackend.MySQL, opts...)
		return err
	}
	if err := check(base); err != nil {
		t.Fatalf("a safe server: %v", err)
	}
	for _, c := range []struct{ set, reset, setting string }{
		{"SET GLOBAL innodb_flush_log_at_trx_commit = 2", "SET GLOBAL innodb_flush_log_at_trx_commit = 1", "innodb_flush_log_at_trx_commit"},
		{"SET GLOBAL sync_binlog = 0", "SET GLOBAL sync_binlog = 1", "sync_binlog"},
		{"SET GLOBAL read_only = 1", "SET GLOBAL read_only = 0", "read_only"},
	} {
		set(c.set)
		wantSafety(t, c.set, check(base), c.setting)
		if err := check(base, sqlbackend.WithSafetyCheck(backend.CheckSkip)); err != nil {
			t.Fatalf("%s with WithSafetyCheck(CheckSkip): %v", c.set, err)
		}
		set(c.reset)
	}
	// A zone with daylight saving: the session on SYSTEM, a server whose
	// host zone is CET. A fixed offset in the DSN is fine.
	wantSafety(t, "a session zone with DST", checkZone(t, "CET"), "time_zone")
	if err := check(base + "?time_zone=%27%2B02%3A00%27"); err != nil {
		t.Fatalf("a fixed offset: %v", err)
	}
	set("CREATE TABLE myisam_leases (k INT) ENGINE=MyISAM")
	wantSafety(t, "a MyISAM lease table", check(base, sqlbackend.WithTablePrefix("myisam_")), "the engine of table myisam_leases")

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	set("CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'right'")
	set("GRANT SELECT ON " + mysqltest.Database + ".* TO 'app'@'127.0.0.1'")
	// Each says first what went wrong: the login, or the connection.
	for _, c := range []struct {
		what, dsn string
		want      error
		begins    string
	}{
		{"a wrong password", fmt.Sprintf("app:wrong@tcp(127.0.0.1:%d)/%s", srv.Port(), mysqltest.Database), backend.ErrAuthRefused,
			"sqlbackend: log in to the MySQL server: " + backend.ErrAuthRefused.Error() + ": Error 1045"},
		{"a closed port", fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?timeout=5s", closedPort, mysqltest.Database), backend.ErrUnreachable,
			"sqlbackend: connect to the MySQL server: " + backend.ErrUnreachable.Error() + ": nothing listens at the address: "},
		{"no database", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", srv.Port()), backend.ErrInvalidConfig, ""},
	} {
		if err := check(c.dsn); !errors.Is(err, c.want) || !strings.HasPrefix(err.Error(), c.begins) {
			t.Errorf("%s: %v; want %v, beginning %q", c.what, err, c.want, c.begins)
		}
	}
	db := openMySQL(t, fmt.Sprintf("app:right@tcp(127.0.0.1:%d)/%s", srv.Port(), mysqltest.Database))
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); !errors.Is(err, backend.ErrPermissionDenied) || !strings.Contains(err.Error(), "1142") {
		t.Errorf("CreateTables by a user without CREATE: %v; want ErrPermissionDenied", err)
	}
}

// checkZone runs New on a server whose system time zone is zone (TZ in
// its environment), with the session on SYSTEM.
func checkZone(t *testing.T, zone string) error {
	srv := mysqltest.StartConfig(t, mysqltest.Config{Env: []string{"TZ=" + zone}})
	_, err := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.MySQL)
	return err
}
