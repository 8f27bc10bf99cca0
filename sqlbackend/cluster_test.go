package sqlbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// Tables copied to another cluster (pg_dump into psql) refuse to grant and
// to renew, failing closed with a *ClusterError, until an operator adopts
// them; then every new token outranks every token of the copy.
func TestPostgresCopiedTablesRefuseUntilAdopted(t *testing.T) {
	ctx := context.Background()
	from, to := pgtest.Start(t), pgtest.Start(t)
	old, err := sqlbackend.New(context.Background(), from.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	var top uint64
	for i := range 3 {
		l, err := old.Grant(ctx, backend.Request{Key: "k", LeaseID: fmt.Sprint("old-", i), Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		top = l.Token
		if i < 2 {
			if err := old.Release(ctx, "k", l.LeaseID); err != nil {
				t.Fatal(err)
			}
		}
	}
	pgtest.CopyDatabase(t, from, to)

	b, err := sqlbackend.New(context.Background(), to.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var ce *sqlbackend.ClusterError
	_, err = b.Grant(ctx, backend.Request{Key: "fresh", LeaseID: "new", Timeout: time.Minute})
	if !errors.As(err, &ce) || !errors.Is(err, sqlbackend.ErrClusterChanged) || ce.Recorded == 0 || ce.Recorded == ce.Current {
		t.Fatalf("Grant on the copy: %v, want a *ClusterError with two system identifiers", err)
	}
	if _, err := b.Renew(ctx, backend.Request{Key: "k", LeaseID: "old-2", Timeout: time.Hour}); !errors.As(err, &ce) {
		t.Fatalf("Renew of a copied lease: %v, want a *ClusterError", err)
	}
	// CreateTables does not adopt them.
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant(ctx, backend.Request{Key: "fresh", LeaseID: "new", Timeout: time.Minute}); !errors.As(err, &ce) {
		t.Fatalf("Grant on the copy after CreateTables: %v, want a *ClusterError", err)
	}
	if st, err := b.Inspect(ctx, "fresh"); err != nil || st.MaxToken != 0 {
		t.Fatalf("Inspect after refused grants: %+v, %v; want nothing granted", st, err)
	}

	epoch, err := b.AdoptCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old, _ := sqlbackend.TokenEpoch(top); epoch <= old {
		t.Fatalf("AdoptCluster = epoch %d, want above the copied tokens' epoch %d", epoch, old)
	}
	if err := b.Release(ctx, "k", "old-2"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k", "fresh"} {
		l, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: "adopted", Timeout: time.Minute})
		if err != nil {
			t.Fatalf("Grant after AdoptCluster: %v", err)
		}
		if e, _ := sqlbackend.TokenEpoch(l.Token); l.Token <= top || e != epoch {
			t.Fatalf("Grant after AdoptCluster: token %d (epoch %d), want above %d in epoch %d", l.Token, e, top, epoch)
		}
	}
	// The SQL function is the same operation, for an operator's psql.
	var sqlEpoch int64
	if err := to.DB(t).QueryRowContext(ctx, "SELECT fencing_adopt_cluster()").Scan(&sqlEpoch); err != nil || sqlEpoch <= int64(epoch) {
		t.Fatalf("SELECT fencing_adopt_cluster() = %d, %v; want an epoch above %d (tokens of epoch %d exist)", sqlEpoch, err, epoch, epoch)
	}
}

// A point-in-time recovery (a base backup recovered to its end, then
// promoted) loses the grants made after the backup, and starts a new
// timeline: its tokens outrank every token granted before, also the lost
// ones.
func TestPostgresPointInTimeRecoveryTokensNeverGoBack(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.StartConfig(t, pgtest.Config{Durable: true, Archive: true})
	b, err := sqlbackend.New(context.Background(), primary.DB(t), sqlbackend.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	var log grantLog
	grant := func(b *sqlbackend.Backend, id, where string) {
		t.Helper()
		start := time.Now()
		l, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: id, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("Grant on the %s: %v", where, err)
		}
		log.add(grantRecord{key: "k", token: l.Token, start: start, ended: time.Now(), where: where})
		if err := b.Release(ctx, "k", id); err != nil {
			t.Fatal(err)
		}
	}
	grant(b, "before-backup", "primary")
	backup := pgtest.BaseBackup(t, primary)
	for i := range 3 {
		grant(b, fmt.Sprint("after-backup-", i), "primary")
	}
	primary.Stop()

	recovered := pgtest.StartRecovery(t, backup)
	rb, err := sqlbackend.New(context.Background(), recovered.DB(t), sqlbackend.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	if st, err := rb.Inspect(ctx, "k"); err != nil || st.MaxToken != log.ops[0].token {
		t.Fatalf("Inspect on the recovered server: %+v, %v; want the grants after the backup lost (max token %d)", st, err, log.ops[0].token)
	}
	grant(rb, "recovered", "recovered server")
	log.check(t)
}
