package sqlbackend_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestPostgresPollSeesReleaseAndRegrant: a release and the next grant
// that fall between two polls (here, one transaction: no poll can see the
// key free) still wake a polling subscriber, which sees the live lease's
// token change. A subscription on a free key, which every poll wakes, tells
// when polls have happened.
func TestPostgresPollSeesReleaseAndRegrant(t *testing.T) {
	ctx := context.Background()
	srv, h := newPostgres(t)
	b, err := h.NewBackend(ctx, t) // polls: no listener
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "first", Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	n := b.(backend.Notifier)
	sub, err := n.NotifyFree(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	tick, err := n.NotifyFree(ctx, "free") // after k's: a poll that wakes it read k too
	if err != nil {
		t.Fatal(err)
	}
	defer tick.Close()
	polls := func(count int) {
		t.Helper()
		for range count {
			select {
			case <-tick.Freed():
			case <-time.After(time.Minute):
				t.Fatal("no poll woke the free key's subscription in a minute")
			}
		}
	}
	drain(tick)
	polls(1) // a poll has seen k held by the first lease
	drain(sub)

	prefix := strings.TrimSuffix(b.(*sqlbackend.Backend).Table(), "leases")
	tx, err := srv.DB(t).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT `+prefix+`release($1, 'first')`, []byte("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT * FROM `+prefix+`grant($1, 'second', $2, 0, '', 0)`, []byte("k"), int64(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	drain(tick)
	polls(2) // the second began after the commit
	select {
	case <-sub.Freed():
	default:
		if tok, live, err := b.Token(ctx, "k"); err != nil || !live || tok != 2 {
			t.Fatalf("Token = %d, %v, %v; want the second lease's, 2", tok, live, err)
		}
		t.Fatal("two polls after a release and a grant in one transaction, the subscriber was not woken")
	}
}
