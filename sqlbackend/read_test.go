package sqlbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestMySQLReadDuringRenewal: Token and Inspect read the row in a snapshot
// and the server's clock after it. When the snapshot's lease ends before
// the clock is read and its holder renews it in between (before its end),
// the lease never ended: both report it live, with its token. The read is
// held up in the statement (SlowClockRead) and the renewal is sent once the
// server shows it sleeping, so the renewal always lands between the two.
func TestMySQLReadDuringRenewal(t *testing.T) {
	_, h := newMySQL(t)
	readsDuringRenewal(t, h, true)
}

// TestPostgresTokenDuringRenewal is TestMySQLReadDuringRenewal for
// PostgreSQL's Token, whose statement's snapshot is taken before its
// clock_timestamp() is read.
func TestPostgresTokenDuringRenewal(t *testing.T) {
	_, h := newPostgres(t)
	readsDuringRenewal(t, h, false)
}

func readsDuringRenewal(t *testing.T, h *harness, inspect bool) {
	ctx := context.Background()
	reads := []struct {
		name string
		live func(b *sqlbackend.Backend, key string) (uint64, bool, error)
	}{
		{"Token", func(b *sqlbackend.Backend, key string) (uint64, bool, error) { return b.Token(ctx, key) }},
		{"Inspect", func(b *sqlbackend.Backend, key string) (uint64, bool, error) {
			st, err := b.Inspect(ctx, key)
			return st.Token, st.Live, err
		}},
	}
	if !inspect {
		reads = reads[:1]
	}
	for n, read := range reads {
		t.Run(read.name, func(t *testing.T) {
			// A renewal that came too late to renew (a very busy machine)
			// proves nothing: try again with a longer lease.
			for ttl := time.Second; ; ttl *= 2 {
				key := fmt.Sprintf("k%d-%v", n, ttl)
				if ok := readDuringRenewal(t, h, key, ttl, read.live); ok {
					return
				}
				if ttl > time.Minute {
					t.Fatal("no renewal arrived before its lease ended")
				}
			}
		})
	}
}

// readDuringRenewal grants key for ttl on a new backend, starts read with the clock read
// held up past the lease's end, renews the lease (for 4*ttl) while the
// read sleeps, and checks what read reports. It returns false when the
// renewal found the lease ended already.
func readDuringRenewal(t *testing.T, h *harness, key string, ttl time.Duration,
	read func(b *sqlbackend.Backend, key string) (uint64, bool, error)) bool {
	t.Helper()
	ctx := context.Background()
	bk, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := bk.(*sqlbackend.Backend)
	defer b.Close()
	req := backend.Request{Key: key, LeaseID: "lease-" + key, Timeout: ttl}
	l, err := b.Grant(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b.SlowClockRead(ttl + ttl/2) // the clock is read after the lease's end
	type answer struct {
		token    uint64
		live     bool
		err      error
		returned time.Time
	}
	got := make(chan answer, 1)
	go func() {
		token, live, err := read(b, key)
		got <- answer{token, live, err, time.Now()}
	}()
	waitUserSleep(t, h)
	renewal := req
	renewal.Timeout = 4 * ttl
	sent := time.Now()
	_, rerr := b.Renew(ctx, renewal)
	a := <-got
	switch {
	case errors.Is(rerr, backend.ErrLeaseExpired):
		t.Logf("the renewal, %v after the grant, found the lease of %v ended", sent.Sub(l.ExpiresAt.Add(-ttl)), ttl)
		return false
	case rerr != nil:
		t.Fatal(rerr)
	case a.err != nil:
		t.Fatal(a.err)
	}
	// The renewed lease lives at least 4*ttl from its renewal's sending.
	if a.returned.Before(sent.Add(renewal.Timeout)) && (!a.live || a.token != l.Token) {
		t.Fatalf("read returned token %d, live %v, %v after the renewal; want token %d live: the lease was renewed before its end",
			a.token, a.live, a.returned.Sub(sent), l.Token)
	}
	return true
}

// waitUserSleep waits until the server shows a statement in SLEEP
// (MySQL) or pg_sleep (PostgreSQL).
func waitUserSleep(t *testing.T, h *harness) {
	t.Helper()
	query := "SELECT count(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User sleep'"
	if h.dialect == sqlbackend.Postgres {
		query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
	}
	waitServerShows(t, h, query, "the read never reached its sleep")
}

// waitServerShows waits until query, a count of what the server shows,
// counts something, for at most a minute, after which it fails t with
// never.
func waitServerShows(t *testing.T, h *harness, query, never string) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		var n int
		if err := h.db.QueryRow(query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Since(start) > time.Minute {
			t.Fatal(never)
		}
	}
}
