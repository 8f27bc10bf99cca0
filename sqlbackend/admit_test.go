package sqlbackend_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/sqlbackend"
)

// admitSetup returns a backend of h and an orders table on its database.
func admitSetup(t *testing.T, h *harness) (*sqlbackend.Backend, string) {
	t.Helper()
	ctx := context.Background()
	be, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	table := fmt.Sprintf("orders_%d", h.n.Load())
	if _, err := h.db.ExecContext(ctx, "CREATE TABLE "+table+" (id INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	return be.(*sqlbackend.Backend), table
}

func insertOrder(h *harness, table string) string {
	if h.dialect == sqlbackend.Postgres {
		return "INSERT INTO " + table + " (id) VALUES ($1)"
	}
	return "INSERT INTO " + table + " (id) VALUES (?)"
}

// forEachDialect runs fn on each dialect, on a database of its own.
func forEachDialect(t *testing.T, fn func(t *testing.T, h *harness)) {
	forEachUpgradable(t, fn)
	t.Run("mysql", func(t *testing.T) {
		_, h := newMySQL(t)
		fn(t, h)
	})
}

// forEachUpgradable runs fn on each dialect that an earlier release of
// the package spoke (not MySQL), for the upgrade tests.
func forEachUpgradable(t *testing.T, fn func(t *testing.T, h *harness)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, &harness{db: openSQLite(t), dialect: sqlbackend.SQLite})
	})
	t.Run("postgres", func(t *testing.T) {
		_, h := newPostgres(t)
		fn(t, h)
	})
}

// A stale token is refused inside the transaction, and the rolled-back
// write is not applied; the live token is admitted and its write commits.
func TestAdmitTxRefusesStaleToken(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		b, table := admitSetup(t, h)
		ctx := context.Background()
		old, err := b.Grant(ctx, backend.Request{Key: "orders", LeaseID: "old", Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.ForceRelease(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		cur, err := b.Grant(ctx, backend.Request{Key: "orders", LeaseID: "new", Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		write := func(id int, token uint64) error {
			tx, err := h.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, insertOrder(h, table), id); err != nil {
				t.Fatal(err)
			}
			if err := b.AdmitTx(ctx, tx, "orders", token); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}
		for _, tok := range []uint64{old.Token, cur.Token + 1, 0, 1 << 63} {
			if err := write(1, tok); !errors.Is(err, guard.ErrStaleToken) {
				t.Fatalf("AdmitTx(token %d) with live token %d: %v, want ErrStaleToken", tok, cur.Token, err)
			}
		}
		if err := write(2, cur.Token); err != nil {
			t.Fatalf("AdmitTx(the live token): %v", err)
		}
		var ids []int
		rows, err := h.db.QueryContext(ctx, "SELECT id FROM "+table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int
			rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		if len(ids) != 1 || ids[0] != 2 {
			t.Fatalf("orders = %v, want only the admitted write [2]", ids)
		}
		// No lease at all: stale too.
		if err := b.Release(ctx, "orders", "new"); err != nil {
			t.Fatal(err)
		}
		if err := write(3, cur.Token); !errors.Is(err, guard.ErrStaleToken) {
			t.Fatalf("AdmitTx after the release: %v, want ErrStaleToken", err)
		}
	})
}

// While a transaction that admitted a token is open, a grant on the key
// (after the lease has expired) and the holder's release wait for it.
func TestAdmitTxHoldsGrantsUntilCommit(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		b, table := admitSetup(t, h)
		ctx := context.Background()
		// A short lease, admitted while live: on a host too slow to begin
		// the transaction within its TTL, again with twice the TTL.
		var tx *sql.Tx
		var sent time.Time
		ttl := 300 * time.Millisecond
		for n := 0; ; n++ {
			sent = time.Now()
			lease, err := b.Grant(ctx, backend.Request{Key: "orders", LeaseID: fmt.Sprintf("a%d", n), Timeout: ttl})
			if err != nil {
				t.Fatal(err)
			}
			if tx, err = h.db.BeginTx(ctx, nil); err != nil {
				t.Fatal(err)
			}
			err = b.AdmitTx(ctx, tx, "orders", lease.Token)
			if err == nil {
				break
			}
			tx.Rollback()
			if !errors.Is(err, guard.ErrStaleToken) || time.Since(sent) < ttl || n == 5 {
				t.Fatalf("AdmitTx %v after the grant of a %v lease: %v", time.Since(sent).Round(time.Millisecond), ttl, err)
			}
			t.Logf("the %v lease ended before AdmitTx (a slow host): %v; again with twice the TTL", ttl, err)
			ttl *= 2
		}
		defer tx.Rollback()
		granted := make(chan error, 1)
		var grantedAt time.Time
		go func() {
			for {
				_, err := b.Grant(ctx, backend.Request{Key: "orders", LeaseID: "b", Timeout: time.Minute})
				var held *backend.HeldError
				if errors.As(err, &held) {
					time.Sleep(held.Remaining)
					continue
				}
				grantedAt = time.Now()
				granted <- err
				return
			}
		}()
		time.Sleep(time.Until(sent.Add(ttl + 700*time.Millisecond))) // the lease has expired; the grant must still wait
		if _, err := tx.ExecContext(ctx, insertOrder(h, table), 1); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-granted:
			t.Fatalf("Grant returned (%v) while the admitting transaction was open", err)
		default:
		}
		committed := time.Now()
		if err := tx.Commit(); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		if err := <-granted; err != nil {
			t.Fatalf("Grant after the commit: %v", err)
		}
		if grantedAt.Before(committed) {
			t.Fatalf("Grant returned before the commit")
		}
	})
}

// A lease that ran out without a release is not live: AdmitTx refuses its
// token, though no one else holds the key yet, and the write is not
// applied.
func TestAdmitTxRefusesExpiredLease(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		b, table := admitSetup(t, h)
		ctx := context.Background()
		const ttl = 200 * time.Millisecond
		lease, err := b.Grant(ctx, backend.Request{Key: "orders", LeaseID: "a", Timeout: ttl})
		if err != nil {
			t.Fatal(err)
		}
		// The store processed the grant before its reply came back: its
		// clock (this host's) has passed the lease's end once its TTL and margin have passed
		// since then, and the microseconds the store rounds to.
		time.Sleep(lease.TTL + lease.Margin + time.Millisecond)
		tx, err := h.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, insertOrder(h, table), 1); err != nil {
			t.Fatal(err)
		}
		if err := b.AdmitTx(ctx, tx, "orders", lease.Token); !errors.Is(err, guard.ErrStaleToken) {
			t.Fatalf("AdmitTx(the token of a lease that expired): %v, want ErrStaleToken", err)
		}
		tx.Rollback()
		var n int
		if err := h.db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d rows written under the expired lease; want none", n)
		}
	})
}
