package sqlbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// A renewal that waits on the lease's row lock until past the lease's end
// finds the lease ended, and the lease does not come back: MySQL's clock
// is read once the statement holds the row (SYSDATE(6)), not when the
// statement began (NOW(6)), before the wait.
func TestMySQLRenewAfterLockWait(t *testing.T) {
	_, h := newMySQL(t)
	ctx := context.Background()
	be, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := be.(*sqlbackend.Backend)
	defer b.Close()
	serverNow := func() int64 {
		t.Helper()
		var nanos int64
		if err := h.db.QueryRowContext(ctx, `SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED) * 1000`).Scan(&nanos); err != nil {
			t.Fatal(err)
		}
		return nanos
	}
	// The renewal must be seen waiting before the lease ends: on a machine
	// too slow for that within the lease, the next try has a lease twice as
	// long.
	for ttl := time.Second; ; ttl *= 2 {
		if ttl > 32*time.Second {
			t.Fatalf("the renewal was never seen waiting for the row lock before the lease's end")
		}
		key := "k" + ttl.String()
		if _, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: "a", Timeout: ttl}); err != nil {
			t.Fatal(err)
		}
		holder, err := h.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var expires int64
		if err := holder.QueryRowContext(ctx, "SELECT expires_at FROM "+b.Table()+" WHERE `key` = ? FOR UPDATE", []byte(key)).Scan(&expires); err != nil {
			t.Fatal(err)
		}
		renewed := make(chan error, 1)
		go func() {
			// Bounded, so that a renewal that never waits fails the test
			// below rather than hanging it.
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, err := b.Renew(rctx, backend.Request{Key: key, LeaseID: "a", Timeout: ttl})
			renewed <- err
		}()
		// Watch for the renewal's statement until the lease's end has
		// passed on the server's clock, the row locked all the while: a
		// statement on the table in flight before the end, which cannot
		// finish while the row is locked, waits for the row. (MariaDB
		// reads a row it finds by its primary key while it plans the
		// statement, in state "Statistics", where INNODB_TRX does not show
		// the wait.) Each look is bounded, so a look that cannot run costs
		// a try, not a hang.
		seen := false
		for serverNow() <= expires {
			select {
			case err := <-renewed:
				t.Fatalf("Renew returned (%v) while another transaction held the row", err)
			default:
			}
			if !seen {
				lctx, cancel := context.WithTimeout(ctx, time.Second)
				var inFlight int
				err := h.db.QueryRowContext(lctx, `SELECT count(*) FROM information_schema.PROCESSLIST
					WHERE ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE CONCAT('%', ?, '%FOR UPDATE%')`, b.Table()).Scan(&inFlight)
				cancel()
				seen = err == nil && inFlight > 0 && serverNow() < expires
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !seen {
			holder.Rollback()
			t.Logf("TTL %v: the renewal was not seen waiting for the row before the lease's end; again with a longer lease", ttl)
			<-renewed
			continue
		}
		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := <-renewed; !errors.Is(err, backend.ErrLeaseExpired) {
			t.Fatalf("Renew that waited for the row from before the lease's end until after it: %v; want ErrLeaseExpired", err)
		}
		if tok, live, err := b.Token(ctx, key); err != nil || live {
			t.Fatalf("Token after the refused renewal: %d, live %v, %v; want no live lease", tok, live, err)
		}
		if _, err := b.Renew(ctx, backend.Request{Key: key, LeaseID: "a", Timeout: ttl}); !errors.Is(err, backend.ErrLeaseExpired) {
			t.Fatalf("Renew again: %v; want ErrLeaseExpired", err)
		}
		return
	}
}
