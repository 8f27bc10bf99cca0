package sqlbackend_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// grantRecord is one acknowledged grant: its key, token, and when the
// call started and returned.
type grantRecord struct {
	key          string
	token        uint64
	start, ended time.Time
	where        string
}

// grantLog is a concurrent history of acknowledged grants.
type grantLog struct {
	mu  sync.Mutex
	ops []grantRecord
}

func (g *grantLog) add(r grantRecord) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ops = append(g.ops, r)
}

// check fails t when a grant that began after another on the same key had
// returned got a token no larger: tokens never go back, in real time.
func (g *grantLog) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.ops {
		for _, b := range g.ops {
			if a.key == b.key && a.ended.Before(b.start) && b.token <= a.token {
				t.Fatalf("key %q: token %d (%s) was acknowledged, then a later grant got token %d (%s): a token went back",
					a.key, a.token, a.where, b.token, b.where)
			}
		}
	}
}

// failoverRuns is how many times the async failover runs: the env
// FENCING_FAILOVER_RUNS, else 3 in CI and 1 elsewhere.
func failoverRuns(t *testing.T) int {
	if v := os.Getenv("FENCING_FAILOVER_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FENCING_FAILOVER_RUNS=%q: want a positive count", v)
		}
		return n
	}
	if os.Getenv("CI") != "" {
		return 3
	}
	return 1
}

// An asynchronous replica, cut off while grants go on and promoted after
// the primary is killed in the middle of them, lacks the last
// acknowledged grants; its tokens still outrank every one of them (the new
// timeline is in their high bits), so over the whole history no token
// goes back. The standby, before its promotion, refuses to grant.
func TestPostgresAsyncFailoverTokensNeverGoBack(t *testing.T) {
	for run := range failoverRuns(t) {
		t.Run(fmt.Sprint("run-", run), asyncFailover)
	}
}

func asyncFailover(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.StartConfig(t, pgtest.Config{Durable: true})
	p := faultproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", primary.Port()), faultproxy.Hooks{})
	replica := pgtest.StartReplica(t, primary, p.Addr())
	// A retention of a second: keys reclaimed before the replica is cut
	// off (the floor replicated with the deletes) and while the workers run
	// (deletes and floor lost with the primary).
	b, err := sqlbackend.New(context.Background(), primary.DB(t), sqlbackend.Postgres, sqlbackend.WithRetention(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	keys := []string{"k0", "k1", "k2"}
	gone := []string{"gone-0", "gone-1", "gone-2", "gone-3"}
	var log grantLog
	grantOn := func(b *sqlbackend.Backend, key, id, where string) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		l, err := b.Grant(cctx, backend.Request{Key: key, LeaseID: id, Timeout: time.Minute})
		if err != nil {
			return err
		}
		log.add(grantRecord{key: key, token: l.Token, start: start, ended: time.Now(), where: where})
		return b.Release(cctx, key, id)
	}
	for _, k := range gone {
		for i := range 3 {
			if err := grantOn(b, k, fmt.Sprintf("%s-%d", k, i), "primary"); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(time.Second + time.Second/4)
	for i := 0; ; i++ {
		if err := grantOn(b, "driver", fmt.Sprint("driver-", i), "primary"); err != nil {
			t.Fatal(err)
		}
		st, err := b.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Reclaimed >= uint64(len(gone)) {
			break
		}
		if i > 1000 {
			t.Fatal("the idle keys were not reclaimed")
		}
		time.Sleep(time.Second / 8)
	}
	for _, k := range keys {
		if err := grantOn(b, k, k+"-first", "primary"); err != nil {
			t.Fatal(err)
		}
	}
	standby, err := sqlbackend.New(context.Background(), replica.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	// Wait until the replica has replayed the tables and the first
	// grants, then cut it off while grants go on.
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, err := standby.Inspect(ctx, "k2")
		if err == nil && st.MaxToken > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not catch up: %+v, %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The standby refuses to grant, whatever New was told.
	var safety *sqlbackend.SafetyError
	if _, err := standby.Grant(ctx, backend.Request{Key: "k0", LeaseID: "on-standby", Timeout: time.Minute}); !errors.As(err, &safety) || safety.Setting != "pg_is_in_recovery()" {
		t.Fatalf("Grant on the standby: %v, want a *SafetyError naming pg_is_in_recovery()", err)
	}
	p.SetMode(faultproxy.Pause)

	// Workers grant and release on the keys until the primary dies.
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	enough := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := keys[(w+i)%len(keys)]
				err := grantOn(b, key, fmt.Sprintf("w%d-%d", w, i), "primary")
				var held *backend.HeldError
				switch {
				case errors.As(err, &held):
					continue
				case err != nil:
					return // the primary is gone
				}
				mu.Lock()
				if granted++; granted == 20 {
					close(enough)
				}
				mu.Unlock()
			}
		}()
	}
	<-enough
	primary.Crash() // in the middle of the workers' grants
	wg.Wait()
	p.Close()
	replica.Promote(t)

	// The checkpoint's timeline: the first grants may come before the
	// promoted server's first checkpoint, and must not read the epoch
	// there.
	var checkpointTimeline int
	if err := replica.DB(t).QueryRowContext(ctx, "SELECT timeline_id FROM pg_control_checkpoint()").Scan(&checkpointTimeline); err != nil {
		t.Fatal(err)
	}
	promoted, err := sqlbackend.New(context.Background(), replica.DB(t), sqlbackend.Postgres)
	if err != nil {
		t.Fatalf("New on the promoted replica: %v", err)
	}
	defer promoted.Close()
	lost := 0
	for _, k := range keys {
		st, err := promoted.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range log.ops {
			if r.key == k && r.token > st.MaxToken {
				lost++
			}
		}
		// A lease the replica received without its release is live there:
		// its holder died with the primary's workers.
		if _, err := promoted.ForceRelease(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := grantOn(promoted, k, k+"-after", "promoted replica"); err != nil {
			t.Fatalf("Grant on the promoted replica: %v", err)
		}
	}
	// The keys reclaimed before the cut-off are gone on the promoted
	// replica too, and start above the floor it received; "driver", idle
	// through the workers' run, may have been reclaimed on the primary only.
	for _, k := range append(gone, "driver") {
		if st, err := promoted.Inspect(ctx, k); err != nil || (k != "driver" && st != (backend.KeyState{})) {
			t.Fatalf("Inspect(%q) on the promoted replica = %+v, %v; want the zero KeyState of a reclaimed key", k, st, err)
		}
		if err := grantOn(promoted, k, k+"-after", "promoted replica"); err != nil {
			t.Fatalf("Grant(%q) on the promoted replica: %v", k, err)
		}
	}
	if epoch, _ := sqlbackend.TokenEpoch(log.ops[len(log.ops)-1].token); epoch != 2 {
		t.Fatalf("the promoted replica's token %d is of epoch %d, want 2 (its timeline)", log.ops[len(log.ops)-1].token, epoch)
	}
	t.Logf("the last checkpoint's timeline when the promoted replica began to grant: %d", checkpointTimeline)
	if lost == 0 {
		t.Fatal("the promoted replica had every acknowledged grant: the test did not cut it off")
	}
	log.check(t)
	t.Logf("%d acknowledged grants, %d of them missing on the promoted replica; no token went back", len(log.ops), lost)
}
