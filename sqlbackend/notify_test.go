package sqlbackend_test

import (
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
		other, err := sqlbackend.New(context.Background(), h.db, h.dialect, append(append([]sqlbackend.Option(nil), h.opts...), prefix)...)
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
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
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
		other, err := sqlbackend.New(context.Background(), h.db, h.dialect, append(append([]sqlbackend.Option(nil), h.opts...), prefix)...)
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

// listenerPIDs returns the server PIDs of the sessions that LISTEN.
func listenerPIDs(t *testing.T, h *harness) []int {
	t.Helper()
	rows, err := h.db.Query(`SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' ORDER BY pid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// The listener session outlives its last subscription for a while, so a
// subscription soon after (the next Lock) reuses it, and wakes on it; then
// it ends by itself, and Close ends it at once.
func TestPostgresListenerLingers(t *testing.T) {
	srv, h := newPostgres(t)
	h.opts = append(h.opts, sqlbackend.WithListener(srv.DSN()))
	ctx := context.Background()
	bb, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := bb.(*sqlbackend.Backend)
	defer b.Close()
	waitFor := func(what string, ok func([]int) bool) []int {
		t.Helper()
		var pids []int
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
			if pids = listenerPIDs(t, h); ok(pids) {
				return pids
			}
		}
		t.Fatalf("%s: listener sessions %v", what, pids)
		return nil
	}
	first, err := b.NotifyFree(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	pids := waitFor("after the first subscription", func(p []int) bool { return len(p) == 1 })
	first.Close()
	turn, err := b.NotifyTurn(ctx, "k", "w")
	if err != nil {
		t.Fatal(err)
	}
	turn.Close()
	second, err := b.NotifyFree(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if again := listenerPIDs(t, h); len(again) != 1 || again[0] != pids[0] {
		t.Fatalf("listener sessions %v after subscribing again, want the first one's, %v", again, pids)
	}
	time.Sleep(50 * time.Millisecond)
	drain(second)
	if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Exec(`SELECT pg_notify($1, encode($2::bytea, 'hex'))`, channelOf(b), []byte("k")); err != nil {
		t.Fatal(err) // as another process's release would (this one's wakes locally)
	}
	select {
	case <-second.Freed():
	case <-time.After(2 * time.Second):
		t.Fatal("no wake-up on the reused listener session")
	}
	second.Close()
	waitFor("after the linger", func(p []int) bool { return len(p) == 0 })

	third, err := b.NotifyFree(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	waitFor("after subscribing once more", func(p []int) bool { return len(p) == 1 })
	third.Close()
	b.Close()
	if p := listenerPIDs(t, h); len(p) != 0 {
		// Close has waited for the session to end; the server may take
		// a moment to drop it from pg_stat_activity.
		waitFor("after Close", func(p []int) bool { return len(p) == 0 })
	}
}

// channelOf is b's NOTIFY channel for releases.
func channelOf(b *sqlbackend.Backend) string {
	table := b.Table()
	return table[:len(table)-len("leases")] + "free"
}

// TestPostgresReleaseNotifiesOnlyWaiters: release and force_release NOTIFY
// only while a listener session (WithListener, a waiter's) listens on the
// tables. A spy session that LISTENs on the channel, without the
// listeners' lock, hears the notifications in commit order: with nobody
// waiting it hears only a marker sent after the releases committed; with
// a waiter subscribed through another Backend it hears each release, and
// the waiter wakes; once that Backend is closed, only the marker again.
func TestPostgresReleaseNotifiesOnlyWaiters(t *testing.T) {
	srv, h := newPostgres(t)
	ctx := context.Background()
	bb, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := bb.(*sqlbackend.Backend)
	defer b.Close()
	ch := channelOf(b)
	spy, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close(ctx)
	if _, err := spy.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := spy.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("the spy's next notification: %v", err)
		}
		return n.Payload
	}
	marker := func(m string) {
		t.Helper()
		if _, err := h.db.Exec(`SELECT pg_notify($1, $2)`, ch, m); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	release := func(force bool) {
		t.Helper()
		n++
		id := "lease-" + strconv.Itoa(n)
		if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: id, Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if force {
			if ended, err := b.ForceRelease(ctx, "k"); err != nil || !ended {
				t.Fatalf("ForceRelease: %v, %v", ended, err)
			}
			return
		}
		if err := b.Release(ctx, "k", id); err != nil {
			t.Fatal(err)
		}
	}
	hexKey := hex.EncodeToString([]byte("k"))

	release(false)
	release(true)
	marker("nobody waited")
	if p := next(); p != "nobody waited" {
		t.Fatalf("with nobody waiting the spy heard %q first, want only the marker", p)
	}

	waiter, err := sqlbackend.New(context.Background(), h.db, sqlbackend.Postgres, sqlbackend.WithTablePrefix(strings.TrimSuffix(b.Table(), "leases")),
		sqlbackend.WithSafetyCheck(backend.CheckSkip), sqlbackend.WithListener(srv.DSN()))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	sub, err := waiter.NotifyFree(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, force := range []bool{false, true} {
		drain(sub)
		start := time.Now()
		release(force)
		if p := next(); p != hexKey {
			t.Fatalf("with a waiter (forced %v) the spy heard %q, want the release's %q", force, p, hexKey)
		}
		select {
		case <-sub.Freed():
			t.Logf("the waiter woke %v after the release began (forced %v)", time.Since(start).Round(time.Millisecond), force)
		case <-time.After(10 * time.Second):
			t.Fatalf("the waiter did not wake (forced %v)", force)
		}
	}

	sub.Close()
	waiter.Close()
	// The server drops the session's lock when the session's process
	// exits, a moment after Close.
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		var held int
		if err := h.db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock'`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held == 0 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the closed listener's lock is still held after %v", time.Since(start))
		}
	}
	release(false)
	marker("the waiter left")
	if p := next(); p != "the waiter left" {
		t.Fatalf("after the waiter left the spy heard %q first, want only the marker", p)
	}
}

// A poll of the line whose read straddles the waiter's own Enqueue (a
// loaded machine makes that likely: the poll's read waits for the file)
// must not wake the waiter: the poll read its place before it joined, the
// Enqueue told it the place after. Waking on that difference woke it for
// nothing twice (then, and at the next poll). A leave ahead still wakes it.
func TestNotifyTurnPollOlderThanEnqueueDoesNotWake(t *testing.T) {
	b, path := sharedFile(t)
	ctx := context.Background()
	other, err := sqlbackend.New(context.Background(), openSQLitePath(t, path), sqlbackend.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Enqueue(ctx, "k", "head", time.Minute); err != nil {
		t.Fatal(err)
	}
	sub, err := b.NotifyTurn(ctx, "k", "w")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	apply := b.ReadTurns(ctx, sub) // the poll reads: w is not in the line
	if p, err := b.Enqueue(ctx, "k", "w", time.Minute); err != nil || p.Ahead != 1 {
		t.Fatalf("Enqueue: %+v, %v", p, err)
	}
	apply()                 // and applies its read after the Enqueue's
	b.ReadTurns(ctx, sub)() // the next poll
	select {
	case <-sub.Freed():
		t.Fatal("woken by a poll that read the line before the waiter's Enqueue")
	default:
	}
	if err := other.Dequeue(ctx, "k", "head"); err != nil {
		t.Fatal(err)
	}
	b.ReadTurns(ctx, sub)()
	select {
	case <-sub.Freed():
	default:
		t.Fatal("not woken by a poll after the entry ahead left")
	}
}

// A leave ahead that the waiter's own Enqueue reads first still wakes the
// waiter. Under load a renewal waits for the file behind the Dequeue of the
// entry ahead and then reads the new place; the poll skips the place while
// the Enqueue is under way, and afterwards compares with what the Enqueue
// recorded, so it sees no change. The Enqueue's caller may not read the
// place (package fencing's keeper renews the entry and looks only at the
// error): without a wake-up, a waiter now at the head slept until the entry
// that had been ahead would have expired (TestLockFIFOHistory/sqlite's lost
// wake-up).
func TestNotifyTurnLeaveReadByRenewalWakes(t *testing.T) {
	b, path := sharedFile(t)
	ctx := context.Background()
	other, err := sqlbackend.New(context.Background(), openSQLitePath(t, path), sqlbackend.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Enqueue(ctx, "k", "head", time.Minute); err != nil {
		t.Fatal(err)
	}
	sub, err := b.NotifyTurn(ctx, "k", "w")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if p, err := b.Enqueue(ctx, "k", "w", time.Minute); err != nil || p.Ahead != 1 {
		t.Fatalf("Enqueue: %+v, %v", p, err)
	}
	b.ReadTurns(ctx, sub)() // a poll: w is behind head, as its Enqueue said
	select {
	case <-sub.Freed():
		t.Fatal("woken before the entry ahead left")
	default:
	}
	release := b.HoldWriter() // the renewal waits for the file
	type renewal struct {
		p   backend.Place
		err error
	}
	renewed := make(chan renewal, 1)
	go func() {
		p, err := b.Enqueue(ctx, "k", "w", time.Minute)
		renewed <- renewal{p, err}
	}()
	for !b.Telling(sub) {
		time.Sleep(time.Millisecond)
	}
	if err := other.Dequeue(ctx, "k", "head"); err != nil {
		t.Fatal(err)
	}
	release()
	if r := <-renewed; r.err != nil || r.p.Ahead != 0 {
		t.Fatalf("the renewal after the leave: %+v, %v", r.p, r.err)
	}
	b.ReadTurns(ctx, sub)() // the next poll
	select {
	case <-sub.Freed():
	default:
		t.Fatal("the waiter now at the head was not woken: only its renewal, whose place its caller may not read, saw the entry ahead leave")
	}
}
