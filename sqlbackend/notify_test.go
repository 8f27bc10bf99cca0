package sqlbackend_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// A release through another Backend (another process, as far as the
// subscriber can tell) wakes a subscription: by polling the rows on SQLite, by
// polling or by LISTEN/NOTIFY on PostgreSQL.
func TestNotifyFreeFromAnotherBackend(t *testing.T) {
	run := func(t *testing.T, h *harness, within time.Duration) {
		ctx := context.Background()
		waiterB, err := h.NewBackend(ctx, t)
		if err != nil {
			t.Fatal(err)
		}
		defer waiterB.Close()
		prefix := sqlbackend.WithTablePrefix("t" + strconv.FormatInt(h.n.Load(), 10) + "_")
		other, err := sqlbackend.New(h.db, h.dialect, append(append([]sqlbackend.Option(nil), h.opts...), prefix)...)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if _, err := other.Grant(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		sub, err := waiterB.(backend.Notifier).NotifyFree(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		drain(sub)
		start := time.Now()
		if err := other.Release(ctx, "k", "a"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sub.Freed():
			t.Logf("woken %v after the release", time.Since(start).Round(time.Millisecond))
		case <-time.After(within):
			t.Fatalf("no wake-up within %v of a release through another Backend", within)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		run(t, &harness{db: openSQLite(t), dialect: sqlbackend.SQLite}, time.Second)
	})
	t.Run("postgres-poll", func(t *testing.T) {
		_, h := newPostgres(t)
		run(t, h, 2*time.Second)
	})
	t.Run("postgres-listen", func(t *testing.T) {
		srv, h := newPostgres(t)
		h.opts = append(h.opts, sqlbackend.WithListener(srv.DSN()))
		run(t, h, time.Second)
	})
}

// drain empties a subscription of the wake-ups of its setting up.
func drain(sub backend.Subscription) {
	for {
		select {
		case <-sub.Freed():
		case <-time.After(50 * time.Millisecond):
			return
		}
	}
}

// Lock on a SQLite pool of one connection: the waiting takes no connection
// for itself, so the holder's release and the waiter's grant get through.
func TestSQLiteLockOnePoolConnection(t *testing.T) {
	db := openSQLite(t)
	db.SetMaxOpenConns(1)
	b, err := sqlbackend.New(db, sqlbackend.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	c := fencing.New(b)
	first, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		c.Release(ctx, "k", first.ID)
	}()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := c.Lock(lctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer l.Release(ctx)
	if l.Token() != first.Token+1 {
		t.Fatalf("Lock token %d, want %d", l.Token(), first.Token+1)
	}
}
