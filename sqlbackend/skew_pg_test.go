package sqlbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faketime"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// newSkewedPostgres starts a PostgreSQL server whose wall clock runs
// offset from this process's, and returns it with a harness on it.
func newSkewedPostgres(t *testing.T, offset time.Duration) (*faketime.Clock, *pgtest.Server, *harness) {
	clock := faketime.New(t, offset)
	srv := pgtest.StartConfig(t, pgtest.Config{Env: clock.Env()})
	h := &harness{db: srv.DB(t), dialect: sqlbackend.Postgres, opts: []sqlbackend.Option{sqlbackend.WithSafetyCheck(backend.CheckSkip)}}
	var server time.Time
	if err := h.db.QueryRow(`SELECT clock_timestamp()`).Scan(&server); err != nil {
		t.Fatal(err)
	}
	if skew := server.Sub(time.Now()); skew < offset-time.Minute || skew > offset+time.Minute {
		t.Fatalf("the server's clock is %v from ours, want about %v: libfaketime did not take", skew, offset)
	}
	return clock, srv, h
}

// TestPostgresTokenUsesServerClock: the server's clock runs an hour ahead
// of the client's. A lease that has expired by the server's clock is not
// live to Token, though by the client's clock it would have an hour left:
// expiry is the coordinator's call, never the client's.
func TestPostgresTokenUsesServerClock(t *testing.T) {
	ctx := context.Background()
	_, _, h := newSkewedPostgres(t, time.Hour)
	b, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if tok, live, err := b.Token(ctx, "k"); err != nil || !live || tok != l.Token {
		t.Fatalf("Token of the live lease = %d, %v, %v; want %d, live", tok, live, err, l.Token)
	}
	for inspect(t, b, "k").Live { // the server's verdict
		time.Sleep(50 * time.Millisecond)
	}
	if tok, live, err := b.Token(ctx, "k"); err != nil || live {
		t.Fatalf("Token after the lease expired on the server's clock = %d, %v, %v; want not live (it ends at %v, an hour ahead of ours)", tok, live, err, l.ExpiresAt)
	}
}
