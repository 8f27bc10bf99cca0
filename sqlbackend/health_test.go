package sqlbackend_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// multiXactMembers reads the server's MultiXact member counter, as of a
// checkpoint taken now.
func multiXactMembers(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var members int64
	if _, err := db.Exec("CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT next_multi_offset::text::bigint FROM pg_control_checkpoint()").Scan(&members); err != nil {
		t.Fatal(err)
	}
	return members
}

// Many AdmitTx on one key at once, at READ COMMITTED, share an advisory
// lock and write no MultiXact; at REPEATABLE READ they share the row's
// FOR SHARE lock, whose MultiXact members grow with every sharer (the
// measure's own check that it sees them).
func TestPostgresAdmitTxWithoutMultiXact(t *testing.T) {
	srv, h := newPostgres(t)
	ctx := context.Background()
	bb, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := bb.(*sqlbackend.Backend)
	defer b.Close()
	lease, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "l", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.DB(t)
	const sharers, rounds = 8, 10
	measure := func(iso sql.IsolationLevel) int64 {
		before := multiXactMembers(t, admin)
		for range rounds {
			var admitted, done sync.WaitGroup
			admitted.Add(sharers)
			errs := make(chan error, sharers)
			for range sharers {
				done.Add(1)
				go func() {
					defer done.Done()
					tx, err := h.db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
					if err != nil {
						admitted.Done()
						errs <- err
						return
					}
					defer tx.Rollback()
					err = b.AdmitTx(ctx, tx, "k", lease.Token)
					admitted.Done()
					admitted.Wait() // every sharer holds its lock at once
					if err == nil {
						err = tx.Commit()
					}
					errs <- err
				}()
			}
			done.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("AdmitTx at %v: %v", iso, err)
				}
			}
		}
		return multiXactMembers(t, admin) - before
	}
	rc := measure(sql.LevelReadCommitted)
	rr := measure(sql.LevelRepeatableRead)
	t.Logf("MultiXact members written by %d rounds of %d concurrent AdmitTx on one key: READ COMMITTED %d, REPEATABLE READ %d", rounds, sharers, rc, rr)
	if rc != 0 {
		t.Fatalf("AdmitTx at READ COMMITTED wrote %d MultiXact members, want 0", rc)
	}
	if rr == 0 {
		t.Fatal("AdmitTx at REPEATABLE READ (FOR SHARE) wrote no MultiXact member: the sharers did not overlap, the measure shows nothing")
	}
}

// horizonWindow is the grant latency of one stretch of a run.
type horizonWindow struct {
	p50, p99, worst time.Duration
	dead            int64
}

// pinnedHorizon grants and releases on a few keys for d while another
// session holds a transaction open (the xmin horizon pinned), and returns
// the latency per tenth of d. Before it returns it checks that Health
// names the pinned session and counts the dead rows it keeps.
func pinnedHorizon(t *testing.T, shipped bool, d time.Duration) []horizonWindow {
	srv, h := newPostgres(t)
	ctx := context.Background()
	bb, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := bb.(*sqlbackend.Backend)
	defer b.Close()
	if !shipped {
		if _, err := h.db.ExecContext(ctx, "ALTER TABLE "+b.Table()+" RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay)"); err != nil {
			t.Fatal(err)
		}
	}
	pin, err := srv.DB(t).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	var pid int
	if err := pin.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := pin.ExecContext(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := pin.ExecContext(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	pinned := time.Now()
	defer pin.ExecContext(ctx, "ROLLBACK")

	var windows []horizonWindow
	var lat []time.Duration
	end, next := pinned.Add(d), pinned.Add(d/10)
	for i := 0; ; i++ {
		now := time.Now()
		if !now.Before(next) || !now.Before(end) {
			slices.Sort(lat)
			hl, err := b.Health(ctx)
			if err != nil {
				t.Fatal(err)
			}
			windows = append(windows, horizonWindow{lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], hl.Leases.DeadRows})
			lat, next = lat[:0], next.Add(d/10)
			if !now.Before(end) {
				break
			}
		}
		key := fmt.Sprint("k", i%4)
		id := fmt.Sprint("l", i)
		start := time.Now()
		if _, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if err := b.Release(ctx, key, id); err != nil {
			t.Fatal(err)
		}
	}
	// The statistics are flushed within a second or so of a session's
	// idling: wait for them, bounded.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		hl, err := b.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held := time.Since(pinned)
		if hl.Horizon != nil && strings.Contains(hl.Horizon.Holder, fmt.Sprint("session ", pid, " ")) && hl.Leases.DeadRows > 0 && hl.Leases.Updates > 0 {
			if hl.Horizon.Age <= 0 || hl.Horizon.Age > held+time.Second {
				t.Fatalf("Health: the horizon's age %v, want within the %v the session has been open", hl.Horizon.Age, held)
			}
			t.Logf("Health: %+v, %+v, horizon %+v; HOT ratio %.2f", hl.Leases, hl.Waiters, *hl.Horizon, hl.Leases.HOTRatio())
			return windows
		}
		if time.Now().After(deadline) {
			t.Fatalf("Health = %+v (horizon %v), want the pinned session %d holding the horizon and dead rows", hl, hl.Horizon, pid)
		}
	}
}

// With the horizon pinned, the lease table keeps every version of its
// hot rows; Health names the session that pins it. The grant latency, with
// the table's default storage and with the shipped settings, is logged per
// tenth of the run: FENCING_HORIZON_DURATION sets the run (default 3s;
// docs/sql.md reports 5m).
func TestPostgresPinnedHorizon(t *testing.T) {
	d := 3 * time.Second
	if v := os.Getenv("FENCING_HORIZON_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("FENCING_HORIZON_DURATION=%q: want a positive duration", v)
		}
	}
	for _, shipped := range []bool{false, true} {
		name := map[bool]string{false: "default storage", true: "shipped storage settings"}[shipped]
		for i, w := range pinnedHorizon(t, shipped, d) {
			t.Logf("%s, %v-%v: grant p50 %v p99 %v max %v; dead rows %d", name, d/10*time.Duration(i), d/10*time.Duration(i+1),
				w.p50.Round(time.Microsecond), w.p99.Round(time.Microsecond), w.worst.Round(time.Microsecond), w.dead)
		}
	}
}

// RegisterHealthMetrics observes Health: the tables' dead rows and HOT
// ratios, and the horizon's age.
func TestPostgresHealthMetrics(t *testing.T) {
	_, h := newPostgres(t)
	ctx := context.Background()
	bb, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := bb.(*sqlbackend.Backend)
	defer b.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	reg, err := sqlbackend.RegisterHealthMetrics(mp, b)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Gauge[int64]:
				seen[m.Name] = len(data.DataPoints)
			case metricdata.Gauge[float64]:
				seen[m.Name] = len(data.DataPoints)
			}
		}
	}
	want := map[string]int{sqlbackend.MetricDeadRows: 2, sqlbackend.MetricHOTRatio: 2, sqlbackend.MetricHorizonAge: 1, sqlbackend.MetricHorizonXIDAge: 1}
	for name, n := range want {
		if seen[name] != n {
			t.Fatalf("collected %v, want %s with %d points", seen, name, n)
		}
	}
}
