package sqlbackend_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestReclaimRacesGrant: a grant on a key that waits for the transaction
// reclaiming the key (its lock on the key) mints, once that transaction
// commits, a token above the key's last one, from the floor that
// transaction raised: the grant reads the floor after its wait, not in a
// snapshot from before it. On PostgreSQL the reclaim function runs in a
// transaction of the test, held open; on MySQL the backend's own batch is
// held inside its transaction. (SQLite runs a batch and a grant one after
// the other, under BEGIN IMMEDIATE.)
//
// The grant is a Grant (PostgreSQL: the one-statement upsert), then a
// GrantMany of a new key and the raced one, whose transaction has read the
// floor for the new key before it waits (a snapshot from before the
// reclamation: MySQL's plain read would see it).
func TestReclaimRacesGrant(t *testing.T) {
	for _, many := range []bool{false, true} {
		name := map[bool]string{false: "Grant", true: "GrantMany"}[many]
		t.Run("Postgres/"+name, func(t *testing.T) {
			_, h := newPostgres(t)
			testReclaimRacesGrant(t, h, many)
		})
		t.Run("MySQL/"+name, func(t *testing.T) {
			_, h := newMySQL(t)
			testReclaimRacesGrant(t, h, many)
		})
	}
}

func testReclaimRacesGrant(t *testing.T, h *harness, many bool) {
	ctx := context.Background()
	retention := time.Millisecond
	if h.dialect == sqlbackend.Postgres {
		retention = 0 // the test reclaims by hand
	}
	be, err := h.NewBackendWithRetention(ctx, t, retention)
	if err != nil {
		t.Fatal(err)
	}
	b := be.(*sqlbackend.Backend)
	defer b.Close()
	prefix := strings.TrimSuffix(b.Table(), "leases")
	const key = "raced"
	var last uint64
	for i := range 5 {
		l, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: fmt.Sprintf("before-%d", i), Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, key, l.LeaseID); err != nil {
			t.Fatal(err)
		}
		last = l.Token
	}

	// The reclaiming transaction has deleted the key's row and raised the
	// floor, and holds the key's lock until commit is closed.
	held, commit := make(chan struct{}), make(chan struct{})
	var committing sync.Once
	letCommit := func() { committing.Do(func() { close(commit) }) }
	defer letCommit() // before Close, which waits for the pass
	reclaimed := make(chan error, 1)
	if h.dialect == sqlbackend.Postgres {
		tx, err := h.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for n := 0; n == 0; {
			if err := tx.QueryRowContext(ctx, `SELECT reclaimed FROM `+prefix+`reclaim($1, 1000)`, int64(time.Millisecond)).Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		close(held)
		go func() {
			<-commit
			reclaimed <- tx.Commit()
		}()
	} else {
		var once sync.Once
		b.HoldReclaim(func() {
			once.Do(func() {
				close(held)
				<-commit
			})
		})
		go func() {
			// Calls drive the reclaiming: once the key has idled for the
			// retention, a pass deletes it and holds.
			for {
				select {
				case <-held:
					reclaimed <- nil
					return
				default:
				}
				b.Release(ctx, "driver", "none")
				time.Sleep(time.Millisecond)
			}
		}()
	}
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("the key was not reclaimed within a minute")
	}

	granted := make(chan backend.Lease, 1)
	grantErr := make(chan error, 1)
	go func() {
		gctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		req := backend.Request{Key: key, LeaseID: "after", Timeout: time.Minute}
		if !many {
			l, err := b.Grant(gctx, req)
			if err != nil {
				grantErr <- err
				return
			}
			granted <- l
			return
		}
		ls, err := b.GrantMany(gctx, []backend.Request{req, {Key: "a new key", LeaseID: "after", Timeout: time.Minute}})
		if err != nil {
			grantErr <- err
			return
		}
		granted <- ls[0]
	}()
	waitForLockWait(t, h)
	letCommit()
	if err := <-reclaimed; err != nil {
		t.Fatalf("the reclaiming transaction: %v", err)
	}
	select {
	case l := <-granted:
		if l.Token <= last {
			t.Fatalf("the grant that waited for the reclamation minted token %d; the key's last was %d: a token reissued", l.Token, last)
		}
		t.Logf("the key's last token %d; after the reclamation %d", last, l.Token)
	case err := <-grantErr:
		t.Fatalf("the grant that waited for the reclamation: %v", err)
	}
	if st, err := b.Size(ctx); err != nil || st.Records != map[bool]int64{false: 1, true: 2}[many] {
		t.Errorf("Size = %+v, %v; want the keys granted after the reclamation", st, err)
	}
}

// waitForLockWait returns once a statement of the backend waits for a lock
// of the reclaiming transaction (PostgreSQL: an advisory lock not granted;
// MySQL, where the reclaiming transaction runs no statement: the read of
// the floor, which it holds, or of the raced key's row in flight).
func waitForLockWait(t *testing.T, h *harness) {
	t.Helper()
	query := `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`
	if h.dialect == sqlbackend.MySQL {
		query = `SELECT count(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Query' AND INFO NOT LIKE '%PROCESSLIST%' ` +
			`AND (INFO LIKE '%LOCK IN SHARE MODE%' OR INFO LIKE '%FOR UPDATE%' AND INFO LIKE '%raced%')`
	}
	waitServerShows(t, h, query, "the grant was never seen waiting for the reclaiming transaction's lock")
}

// TestRetentionDropsDeadEntries: a line's entry that expired the retention
// ago is deleted by a pass that calls on another key drive, with no call on
// its own key; a live entry stays in its line.
func TestRetentionDropsDeadEntries(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	h := &harness{db: openSQLite(t), dialect: sqlbackend.SQLite, clock: clock}
	be, err := h.NewBackendWithRetention(ctx, t, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := be.(*sqlbackend.Backend)
	defer b.Close()
	if _, err := b.Enqueue(ctx, "line/dead", "w1", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, "line/live", "w2", time.Hour); err != nil {
		t.Fatal(err)
	}
	entries := func() int {
		t.Helper()
		var n int
		if err := h.db.QueryRow(`SELECT count(*) FROM ` + strings.TrimSuffix(b.Table(), "leases") + `waiters`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	clock.Advance(2 * time.Second)
	for i := 0; entries() != 1; i++ {
		if i == 1000 {
			t.Fatalf("%d entries after 1000 grants on another key past the retention; want the live one", entries())
		}
		l, err := b.Grant(ctx, backend.Request{Key: "driver", LeaseID: fmt.Sprint("d", i), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, l.Key, l.LeaseID); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second / 8)
	}
	if n, err := b.LineLength(ctx, "line/live"); err != nil || n != 1 {
		t.Fatalf("LineLength of the live line = %d, %v; want 1", n, err)
	}
}
