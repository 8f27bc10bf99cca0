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

// A Dequeue through another Backend wakes the waiter directly behind the
// leaver, and only it: by the dequeue function's NOTIFY on PostgreSQL with a
// listener, by the poll of the line otherwise. The waiters further back stay
// asleep for several polls.
func TestNotifyTurnOnlyTheNext(t *testing.T) {
	run := func(t *testing.T, h *harness, within time.Duration) {
		ctx := context.Background()
		waiterB, err := h.NewBackend(ctx, t)
		if err != nil {
			t.Fatal(err)
		}
		defer waiterB.Close()
		q := waiterB.(backend.Queuer)
		prefix := sqlbackend.WithTablePrefix("t" + strconv.FormatInt(h.n.Load(), 10) + "_")
		other, err := sqlbackend.New(h.db, h.dialect, append(append([]sqlbackend.Option(nil), h.opts...), prefix)...)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if _, err := other.Enqueue(ctx, "k", "leaver", time.Minute); err != nil {
			t.Fatal(err)
		}
		var subs []backend.Subscription
		for i, w := range []string{"next", "second", "third"} {
			sub, err := q.NotifyTurn(ctx, "k", w)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if p, err := q.Enqueue(ctx, "k", w, time.Minute); err != nil || p.Ahead != i+1 {
				t.Fatalf("Enqueue(%s): %+v, %v", w, p, err)
			}
			subs = append(subs, sub)
		}
		time.Sleep(50 * time.Millisecond) // the listener's wake-up on connecting, if any
		for _, sub := range subs {
			select { // (drain would wait for ever on a poll that wakes every time)
			case <-sub.Freed():
			default:
			}
		}
		start := time.Now()
		if err := other.Dequeue(ctx, "k", "leaver"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-subs[0].Freed():
			t.Logf("woken %v after the Dequeue", time.Since(start).Round(time.Millisecond))
		case <-time.After(within):
			t.Fatalf("the waiter behind the leaver was not woken within %v of a Dequeue through another Backend", within)
		}
		time.Sleep(within) // several polls
		for i, sub := range subs[1:] {
			select {
			case <-sub.Freed():
				t.Fatalf("the waiter %d places behind the leaver was woken too", i+2)
			default:
			}
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		run(t, &harness{db: openSQLite(t), dialect: sqlbackend.SQLite}, 300*time.Millisecond)
	})
	t.Run("postgres-poll", func(t *testing.T) {
		_, h := newPostgres(t)
		run(t, h, time.Second)
	})
	t.Run("postgres-listen", func(t *testing.T) {
		srv, h := newPostgres(t)
		h.opts = append(h.opts, sqlbackend.WithListener(srv.DSN()))
		run(t, h, time.Second)
	})
}
