package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// What a deployment meets at start-up is told apart, with errors.Is: a
// refused password or role, a server that does not answer, a role that
// may not create the tables, and pgx's cached prepared statements through
// PgBouncer in transaction mode.
func TestPostgresStartErrors(t *testing.T) {
	srv := pgtest.Start(t)
	srv.RequirePassword(t, "app", "right")
	bouncer := pgtest.StartBouncer(t, srv, 1)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close() // nothing listens there now
	dsn := func(user string, port int) string {
		return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=10", user, port)
	}
	newBackend := func(dsn string, opts ...sqlbackend.Option) (*sqlbackend.Backend, error) {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return sqlbackend.New(context.Background(), db, sqlbackend.Postgres, opts...)
	}
	all := []error{backend.ErrAuthRefused, backend.ErrUnreachable, backend.ErrPermissionDenied, backend.ErrInvalidConfig, backend.ErrUnsafeStore}
	only := func(t *testing.T, what string, err, want error, says string) {
		t.Helper()
		for _, e := range all {
			if errors.Is(err, e) != (e == want) {
				t.Errorf("%s: %v; want an error wrapping %v alone", what, err, want)
				return
			}
		}
		if !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v; want it to say %q", what, err, says)
		}
	}
	for _, c := range []struct {
		what, dsn string
		want      error
		says      string
	}{
		{"a wrong password", strings.Replace(dsn("app", srv.Port()), "app@", "app:wrong@", 1), backend.ErrAuthRefused, "28P01"},
		{"no password", dsn("app", srv.Port()), backend.ErrAuthRefused, "28P01"},
		{"an unknown role", dsn("nobody", srv.Port()), backend.ErrAuthRefused, `"nobody"`},
		{"a closed port", dsn("app", closedPort), backend.ErrUnreachable, "refused"},
	} {
		_, err := newBackend(c.dsn)
		only(t, c.what, err, c.want, c.says)
		// Each says first what went wrong: the login, or the connection.
		begins := map[error]string{
			backend.ErrAuthRefused: "sqlbackend: log in to the PostgreSQL server: " + backend.ErrAuthRefused.Error() + ": ",
			backend.ErrUnreachable: "sqlbackend: connect to the PostgreSQL server: " + backend.ErrUnreachable.Error() + ": nothing listens at the address: ",
		}[c.want]
		if err != nil && !strings.HasPrefix(err.Error(), begins) {
			t.Errorf("%s: %v; want it to begin %q", c.what, err, begins)
		}
	}
	// The role may log in but not create in the schema public.
	b, err := newBackend(strings.Replace(dsn("app", srv.Port()), "app@", "app:right@", 1), sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	only(t, "CreateTables without CREATE on the schema", b.CreateTables(context.Background()), backend.ErrPermissionDenied, "42501")

	// Through PgBouncer 1.18 (one server session) without
	// default_query_exec_mode: the second client's prepared statement
	// clashes with the first's on the one session.
	noExec := strings.Replace(bouncer.DSN(), "&default_query_exec_mode=exec", "", 1)
	var clash error
	for range 2 {
		if _, err := newBackend(noExec); err != nil {
			clash = err
		}
	}
	if clash == nil {
		t.Skip("this PgBouncer keeps prepared statements (1.21 or later with max_prepared_statements)")
	}
	t.Logf("through PgBouncer without default_query_exec_mode: %v", clash)
	only(t, "pgx's prepared statements through PgBouncer", clash, backend.ErrInvalidConfig, "default_query_exec_mode=exec")
}

// WithListener through PgBouncer in transaction mode would never hear a
// release: New refuses it, and takes a connection that reaches the server.
func TestPostgresListenerThroughPgBouncer(t *testing.T) {
	srv := pgtest.Start(t)
	bouncer := pgtest.StartBouncer(t, srv, 4)
	db := bouncer.DB(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // bounds the wait for a NOTIFY that never comes
	_, err := sqlbackend.New(ctx, db, sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip), sqlbackend.WithListener(bouncer.DSN()))
	cancel()
	if !errors.Is(err, sqlbackend.ErrNoNotifications) || !strings.Contains(err.Error(), "PgBouncer") {
		t.Fatalf("WithListener through PgBouncer: %v; want ErrNoNotifications naming PgBouncer", err)
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip), sqlbackend.WithListener(srv.DSN()))
	if err != nil {
		t.Fatalf("WithListener on the server, the pool through PgBouncer: %v", err)
	}
	b.Close()
}
