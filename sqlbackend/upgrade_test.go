package sqlbackend_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// createV1 makes the tables (and on PostgreSQL the functions) of the
// release before lock delay and the waiters table, with the given prefix,
// from testdata.
func createV1(t *testing.T, h *harness, prefix string) {
	t.Helper()
	file := "testdata/v1-sqlite.sql"
	if h.dialect == sqlbackend.Postgres {
		file = "testdata/v1-postgres.sql"
	}
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("{t}", prefix+"leases", "{p}", prefix, "{ch}", prefix+"free")
	for _, stmt := range strings.Split(r.Replace(string(text)), "\n----\n") {
		if _, err := h.db.Exec(stmt); err != nil {
			t.Fatalf("the earlier release's DDL: %v\n%s", err, stmt)
		}
	}
}

// grantV1 grants a lease as a process of the earlier release does: through
// its five-argument grant function on PostgreSQL, by writing the row on
// SQLite. It returns the outcome (0 granted, 2 held) and the token.
func grantV1(t *testing.T, h *harness, prefix, key, id string, ttl time.Duration) (int, int64) {
	t.Helper()
	var outcome int
	var token *int64
	if h.dialect == sqlbackend.Postgres {
		err := h.db.QueryRow(`SELECT outcome, token FROM `+prefix+`grant($1, $2, $3, 0, 'v1 holder')`, []byte(key), id, int64(ttl)).Scan(&outcome, &token)
		if err != nil {
			t.Fatalf("the earlier release's grant: %v", err)
		}
		if token == nil {
			return outcome, 0
		}
		return outcome, *token
	}
	boot, since, _ := sqlbackend.SystemClock().Now()
	_, err := h.db.Exec(`INSERT INTO `+prefix+`leases (key, token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns, owner) `+
		`VALUES (?, 7, ?, 0, ?, ?, ?, 0, 'v1 holder')`, []byte(key), id, boot, int64(since+ttl), int64(ttl))
	if err != nil {
		t.Fatalf("the earlier release's row: %v", err)
	}
	return 0, 7
}

// TestUpgradeFromEarlierRelease: on the tables of the release before lock
// delay, with a lease of that release live, the operations that need the
// new schema fail with ErrOldSchema, naming what is missing and
// CreateTables (on PostgreSQL Token keeps working); CreateTables brings the tables
// up to date (twice is harmless), the live lease stays live with its token,
// and lock delay and the line work. On PostgreSQL a process of the earlier
// release, calling its grant function, sees a lock delay as a held key.
func TestUpgradeFromEarlierRelease(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		const prefix = "v1_"
		createV1(t, h, prefix)
		_, v1Token := grantV1(t, h, prefix, "k", "v1-lease", time.Minute)
		b, err := sqlbackend.New(context.Background(), h.db, h.dialect, append(h.opts, sqlbackend.WithTablePrefix(prefix))...)
		if err != nil {
			t.Fatalf("New on the earlier release's tables: %v", err)
		}
		defer b.Close()

		wantOld := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, sqlbackend.ErrOldSchema) || errors.Is(err, sqlbackend.ErrNoTables) || errors.Is(err, backend.ErrOutcomeUnknown) ||
				!strings.Contains(err.Error(), "CreateTables") || !strings.Contains(err.Error(), "delay_until") ||
				!strings.Contains(err.Error(), prefix+"waiters") {
				t.Fatalf("%s before CreateTables: %v, want ErrOldSchema naming the missing column, table and CreateTables", what, err)
			}
		}
		_, err = b.Grant(ctx, backend.Request{Key: "other", LeaseID: "new-1", Timeout: time.Minute, LockDelay: time.Second})
		wantOld("Grant", err)
		_, err = b.Inspect(ctx, "k")
		wantOld("Inspect", err)
		_, err = b.Enqueue(ctx, "k", "waiter-1", time.Minute)
		wantOld("Enqueue", err)
		token, live, err := b.Token(ctx, "k")
		if h.dialect == sqlbackend.Postgres {
			// Token reads only the earlier release's columns.
			if err != nil || !live || int64(token) != v1Token {
				t.Fatalf("Token before CreateTables: %d, %v, %v; want the earlier release's live lease %d", token, live, err, v1Token)
			}
		} else {
			wantOld("Token", err) // SQLite reads the whole row
		}

		for i := range 2 {
			if err := b.CreateTables(ctx); err != nil {
				t.Fatalf("CreateTables #%d on the earlier release's tables: %v", i+1, err)
			}
		}
		st, err := b.Inspect(ctx, "k")
		if err != nil || !st.Live || int64(st.Token) != v1Token || st.Owner != "v1 holder" || st.LockDelay != 0 || !st.DelayedUntil.IsZero() {
			t.Fatalf("Inspect after CreateTables: %+v, %v; want the earlier release's lease live, no delay", st, err)
		}
		if _, err := b.Renew(ctx, backend.Request{Key: "k", LeaseID: "v1-lease", Timeout: time.Minute}); err != nil {
			t.Fatalf("Renew of the earlier release's lease: %v", err)
		}
		if err := b.Release(ctx, "k", "v1-lease"); err != nil {
			t.Fatalf("Release of the earlier release's lease: %v", err)
		}
		l, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "new-2", Timeout: 100 * time.Millisecond, LockDelay: time.Minute})
		want := uint64(v1Token + 1)
		if h.dialect == sqlbackend.Postgres {
			want = 1<<sqlbackend.EpochShift | want // the first epoch (timeline 1), the counter going on
		}
		if err != nil || l.Token != want {
			t.Fatalf("Grant after the upgrade: %+v, %v; want token %d", l, err, want)
		}
		if p, err := b.Enqueue(ctx, "k", "waiter-1", time.Minute); err != nil || p.Ahead != 0 {
			t.Fatalf("Enqueue after the upgrade: %+v, %v", p, err)
		}
		time.Sleep(150 * time.Millisecond) // the lease expires; its delay runs
		_, err = b.Grant(ctx, backend.Request{Key: "k", LeaseID: "new-3", Timeout: time.Minute})
		var held *backend.HeldError
		if !errors.As(err, &held) || !held.Delayed {
			t.Fatalf("Grant during the lock delay: %v, want a delayed *HeldError", err)
		}
		if h.dialect == sqlbackend.Postgres {
			if outcome, _ := grantV1(t, h, prefix, "k", "v1-late", time.Minute); outcome != 2 {
				t.Fatalf("the earlier release's grant during a lock delay: outcome %d, want 2 (held)", outcome)
			}
		}
	})
}

// DDL, as a migration tool runs it: on a fresh database twice over, and on
// the earlier release's tables (after, on SQLite, the two ALTER TABLEs its
// documentation gives); the backend then works.
func TestDDLForMigrations(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		for _, c := range []struct {
			prefix string
			v1     bool
		}{{"fresh_", false}, {"migrated_", true}} {
			b, err := sqlbackend.New(context.Background(), h.db, h.dialect, append(h.opts, sqlbackend.WithTablePrefix(c.prefix))...)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			runs := 2
			if c.v1 {
				createV1(t, h, c.prefix)
				runs = 1
				if h.dialect == sqlbackend.SQLite {
					for _, col := range []string{"lock_delay_ns", "delay_until"} {
						if _, err := h.db.Exec(`ALTER TABLE ` + c.prefix + `leases ADD COLUMN ` + col + ` INTEGER NOT NULL DEFAULT 0`); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			for range runs {
				for _, stmt := range b.DDL() {
					if _, err := h.db.Exec(stmt); err != nil {
						t.Fatalf("%s: %v\n%s", c.prefix, err, stmt)
					}
				}
			}
			if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute, LockDelay: time.Second}); err != nil {
				t.Fatalf("%s: Grant: %v", c.prefix, err)
			}
			if _, err := b.Enqueue(ctx, "k", "w", time.Minute); err != nil {
				t.Fatalf("%s: Enqueue: %v", c.prefix, err)
			}
		}
	})
}
