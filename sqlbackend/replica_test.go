package sqlbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// failover runs grants on a primary with a streaming replica behind a
// proxy, cuts the replica off, grants again, kills the primary and
// promotes the replica. It returns the highest token a grant returned on
// the primary and the token the promoted replica grants next.
func failover(t *testing.T, synchronous bool) (acked, next uint64) {
	primary := pgtest.StartConfig(t, pgtest.Config{Durable: true})
	ctx := context.Background()
	if synchronous {
		admin := primary.DB(t)
		if _, err := admin.ExecContext(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
	p := faultproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", primary.Port()), faultproxy.Hooks{})
	replica := pgtest.StartReplica(t, primary, p.Addr())
	b, err := sqlbackend.New(context.Background(), primary.DB(t), sqlbackend.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	grant := func(id string) error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		l, err := b.Grant(cctx, backend.Request{Key: "k", LeaseID: id, Timeout: time.Minute})
		if err != nil {
			return err
		}
		acked = max(acked, l.Token)
		return b.Release(cctx, "k", id)
	}
	for i := range 3 {
		if err := grant(fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the replica has replayed them.
	replicaBackend, err := sqlbackend.New(context.Background(), replica.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer replicaBackend.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		st, err := replicaBackend.Inspect(ctx, "k")
		if err == nil && st.MaxToken == acked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not catch up: %+v, %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.SetMode(faultproxy.Pause) // the replica is cut off
	for i := range 2 {
		err := grant(fmt.Sprintf("cut-off-%d", i))
		if synchronous && !errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("Grant with the synchronous standby cut off: %v, want ErrOutcomeUnknown (the commit waits for the standby)", err)
		}
		if !synchronous && err != nil {
			t.Fatalf("Grant with the asynchronous replica cut off: %v", err)
		}
	}
	primary.Crash()
	p.Close()
	replica.Promote(t)
	if synchronous {
		// The standby copied the primary's setting; alone now, it would
		// wait for a standby of its own at every commit.
		admin := replica.DB(t)
		if _, err := admin.ExecContext(ctx, "ALTER SYSTEM RESET synchronous_standby_names"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
	promoted, err := sqlbackend.New(context.Background(), replica.DB(t), sqlbackend.Postgres)
	if err != nil {
		t.Fatalf("New on the promoted replica: %v", err)
	}
	defer promoted.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := promoted.Grant(cctx, backend.Request{Key: "k", LeaseID: "after", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return acked, l.Token
}

// With synchronous_standby_names and synchronous_commit=on a grant is
// acknowledged only once the standby has it: no acknowledged token is
// reissued after promotion.
func TestPostgresSyncFailoverKeepsTokens(t *testing.T) {
	acked, next := failover(t, true)
	if next <= acked {
		t.Fatalf("the promoted standby granted %d, but %d was acknowledged before the failover", next, acked)
	}
	t.Logf("token %d acknowledged before the failover, %d after it", acked, next)
}
