package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// Grant and Renew check, in their own statement, what New checked once: a
// session whose synchronous_commit is off (set on the session, the role or
// the database) and an UNLOGGED lease table are refused with a
// *SafetyError naming the setting, and nothing changes. New and
// CreateTables refuse the unlogged table too. (A standby's refusal is
// tested with a real standby in TestPostgresAsyncFailoverTokensNeverGoBack.)
func TestPostgresGrantChecksSettings(t *testing.T) {
	srv := pgtest.StartConfig(t, pgtest.Config{Durable: true})
	ctx := context.Background()
	admin := srv.DB(t)
	b, err := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "held", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(db *sql.DB, q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// refused checks that both calls on b fail naming setting, and that
	// the lease is as it was.
	refused := func(what string, b *sqlbackend.Backend, setting string) {
		t.Helper()
		var safety *sqlbackend.SafetyError
		_, err := b.Grant(ctx, backend.Request{Key: "other", LeaseID: "x", Timeout: time.Minute})
		if !errors.As(err, &safety) || safety.Setting != setting || !errors.Is(err, backend.ErrUnsafeStore) {
			t.Fatalf("%s: Grant = %v, want a *SafetyError naming %s", what, err, setting)
		}
		_, err = b.Renew(ctx, backend.Request{Key: "k", LeaseID: "held", Timeout: time.Minute})
		if !errors.As(err, &safety) || safety.Setting != setting {
			t.Fatalf("%s: Renew = %v, want a *SafetyError naming %s", what, err, setting)
		}
		if st, err := b.Inspect(ctx, "k"); err != nil || !st.Live || st.Token != held.Token || !st.ExpiresAt.Equal(held.ExpiresAt) {
			t.Fatalf("%s: Inspect = %+v, %v; want the held lease unchanged", what, st, err)
		}
		if st, err := b.Inspect(ctx, "other"); err != nil || st.MaxToken != 0 {
			t.Fatalf("%s: Inspect(other) = %+v, %v; want no grant", what, st, err)
		}
	}
	granted := func(what string, b *sqlbackend.Backend) {
		t.Helper()
		l, err := b.Renew(ctx, backend.Request{Key: "k", LeaseID: "held", Timeout: time.Hour})
		if err != nil {
			t.Fatalf("%s: Renew = %v", what, err)
		}
		held = l
	}

	// A session setting, behind New's back: one connection.
	one := srv.DB(t)
	one.SetMaxOpenConns(1)
	sb, err := sqlbackend.New(context.Background(), one, sqlbackend.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	exec(one, "SET synchronous_commit = off")
	refused("SET synchronous_commit = off", sb, "synchronous_commit")
	// A process of an earlier release, which knows only the outcomes of
	// its time, calls the same function: it gets an error, not an outcome
	// it would misread.
	var outcome int
	err = one.QueryRowContext(ctx, "SELECT outcome FROM fencing_grant($1, 'old', 60000000000, 0, '', 0)", []byte("other")).Scan(&outcome)
	if err == nil || !strings.Contains(err.Error(), "synchronous_commit") {
		t.Fatalf("the grant function called as an earlier release does: outcome %d, %v; want an error naming synchronous_commit", outcome, err)
	}
	exec(one, "RESET synchronous_commit")
	granted("RESET synchronous_commit", sb)

	// The role's and the database's defaults, set after New.
	for _, c := range []struct{ set, reset string }{
		{"ALTER ROLE postgres SET synchronous_commit = off", "ALTER ROLE postgres RESET synchronous_commit"},
		{"ALTER DATABASE postgres SET synchronous_commit = off", "ALTER DATABASE postgres RESET synchronous_commit"},
	} {
		exec(admin, c.set)
		fresh := srv.DB(t) // new sessions
		nb, err := sqlbackend.New(context.Background(), fresh, sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
		if err != nil {
			t.Fatal(err)
		}
		refused(c.set, nb, "synchronous_commit")
		nb.Close()
		exec(admin, c.reset)
	}
	granted("after the resets", b)

	// An "optimization" of the lease table to UNLOGGED.
	exec(admin, "ALTER TABLE "+b.Table()+" SET UNLOGGED")
	setting := "persistence of " + b.Table()
	refused("ALTER TABLE ... SET UNLOGGED", b, setting)
	var safety *sqlbackend.SafetyError
	if _, err := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.Postgres); !errors.As(err, &safety) || safety.Setting != setting {
		t.Fatalf("New on an unlogged lease table: %v, want a *SafetyError naming %s", err, setting)
	}
	if err := b.CreateTables(ctx); !errors.As(err, &safety) || safety.Setting != setting {
		t.Fatalf("CreateTables on an unlogged lease table: %v, want a *SafetyError naming %s", err, setting)
	}
	exec(admin, "ALTER TABLE "+b.Table()+" SET LOGGED")
	granted("SET LOGGED", b)
}
