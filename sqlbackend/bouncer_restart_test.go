package sqlbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// A held lease survives a restart of PostgreSQL behind PgBouncer with
// server_login_retry = 1 (docs/sql.md): PgBouncer logs in again a second
// after a failed login, not after its default 15 seconds, and the renewer
// renews before the lease's end. With PgBouncer's default (15s), the
// renewals of a 10s lease all fail and the lease is lost.
func TestPostgresLeaseKeptAcrossRestartBehindPgBouncer(t *testing.T) {
	const ttl = 10 * time.Second // shorter than PgBouncer's default server_login_retry
	srv := pgtest.Start(t)
	bouncer := pgtest.StartBouncerConfig(t, srv, pgtest.BouncerConfig{PoolSize: 4, ServerLoginRetry: time.Second})
	b, err := sqlbackend.New(context.Background(), bouncer.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := fencing.New(b).Hold(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	before := held.Lease()
	stopped := time.Now()
	srv.Stop()
	// A read while the server is down makes PgBouncer try a login, which
	// fails: from then on it waits server_login_retry before the next.
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = b.Inspect(rctx, "k")
	cancel()
	if err == nil {
		t.Fatal("a read through PgBouncer succeeded while PostgreSQL was down")
	}
	t.Logf("a read while PostgreSQL was down: %v", err)
	srv.Restart(t)
	up := time.Now()
	t.Logf("PostgreSQL was down for %v", up.Sub(stopped).Round(time.Millisecond))
	if up.After(before.ExpiresAt) {
		t.Fatalf("the restart took %v, past the lease's end: nothing to see", up.Sub(stopped))
	}
	// Renewed (a later end, the same token) or lost: one of them happens
	// by the lease's end.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-held.Done():
			t.Fatalf("the lease was lost %v after PostgreSQL was up again: %v", time.Since(up).Round(time.Millisecond), held.Err())
		case <-tick.C:
		}
		if l := held.Lease(); l.ExpiresAt.After(before.ExpiresAt) {
			if l.Token != before.Token {
				t.Fatalf("token %d after the restart, want %d", l.Token, before.Token)
			}
			t.Logf("renewed %v after PostgreSQL was up again, with %v of the lease left", time.Since(up).Round(time.Millisecond), before.ExpiresAt.Sub(time.Now()).Round(time.Millisecond))
			return
		}
	}
}
