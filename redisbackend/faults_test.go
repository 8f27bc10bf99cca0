package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/internal/testing/serverproc"
	"github.com/fencing-go/fencing/redisbackend"
)

// Fault tests on real redis-server processes: what clients saw while the
// server was killed, slowed down, failed over or ran on another clock,
// checked against the lease model (conformance.CheckLinearizable) and the
// contract's bounds.

// faultTraits are the conformance harness's traits: one server on this
// machine decides expiry.
func faultTraits() conformance.Traits { return (&harness{}).Traits() }

// noRetries makes a client fail at once while the server is down (no resent
// commands, one dial) and give up on a call when its context ends.
func noRetries(o *redis.Options) {
	o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = -1, 1, true
}

// killHistory runs the fault workload on a server run as cfg, killing it
// with SIGKILL and restarting it kills times, and returns the history.
func killHistory(t *testing.T, cfg redistest.Config, kills int, opts ...redisbackend.Option) []conformance.Op {
	t.Helper()
	srv := redistest.Start(t, cfg)
	return faultHistory(t, srv, kills, func() {
		srv.Kill()
		time.Sleep(400 * time.Millisecond)
		srv.Restart()
	}, opts...)
}

// faultHistory runs the fault workload on 4 clients of srv, making fault
// happen faults times a second apart, and returns the history.
func faultHistory(t *testing.T, srv *redistest.Server, faults int, fault func(), opts ...redisbackend.Option) []conformance.Op {
	t.Helper()
	var bs []backend.Backend
	for range 4 {
		bs = append(bs, newBackend(t, srv.Client(noRetries), opts...))
	}
	rec := conformance.NewRecorder(nil)
	w := conformance.Workload{Keys: []string{"k0", "k1", "k2"}, Timeout: 300 * time.Millisecond, Margin: 100 * time.Millisecond, CallTimeout: time.Second, Seed: 1}
	all := make([]func(), faults)
	for i := range all {
		all[i] = fault
	}
	w.RunAround(t, rec, bs, all...)
	return rec.History()
}

// TestKillRestartHistory: clients grant, renew, release and check while the
// server (AOF, fsync always) is killed with SIGKILL and restarted twice; the
// history must be linearizable. A call cut off by the kill must report an
// unknown outcome unless it surely did nothing, and no token may come back
// after the restart.
func TestKillRestartHistory(t *testing.T) {
	conformance.CheckLinearizable(t, killHistory(t, persistent, 2), faultTraits())
	t.Run("Batched", func(t *testing.T) {
		// Every request through the batch sender: a kill cuts off whole
		// batches, and each of their calls must still be classified right.
		history := killHistory(t, persistent, 2, redisbackend.WithEveryRequestBatched())
		conformance.CheckLinearizable(t, history, faultTraits())
	})
}

// TestPauseHistory: the same workload while the server is frozen (SIGSTOP)
// for longer than a lease, twice: calls that time out during the freeze
// reach the server and run once it resumes, so they must report an unknown
// outcome; a backend that reported them as failed would fail the check.
func TestPauseHistory(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "Direct", true: "Batched"}[batched], func(t *testing.T) {
			var opts []redisbackend.Option
			if batched {
				opts = append(opts, redisbackend.WithEveryRequestBatched())
			}
			srv := redistest.Start(t, persistent)
			history := faultHistory(t, srv, 2, func() {
				if err := srv.Pause(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(1500 * time.Millisecond)
				if err := srv.Resume(); err != nil {
					t.Fatal(err)
				}
			}, opts...)
			conformance.CheckLinearizable(t, history, faultTraits())
		})
	}
}

// TestKillRestartWithoutPersistenceFailsCheck: the same workload on a server
// without persistence (its check overridden) loses every token in the kill,
// and the checker must say so: the control that shows the test above can
// fail.
func TestKillRestartWithoutPersistenceFailsCheck(t *testing.T) {
	t.Setenv(conformance.VisualizationDirEnv, t.TempDir())
	history := killHistory(t, redistest.Config{}, 1, redisbackend.WithSafetyCheck(backend.CheckSkip))
	if err := conformance.CheckHistory(history, faultTraits()); err == nil {
		t.Fatal("the checker accepted a history across a restart that lost every token")
	} else {
		t.Logf("rejected as it should be: %v", err)
	}
}

// failover grants "k" on a primary (once replicated, once after its replica
// was cut off, so the second grant never reaches it), kills the primary,
// promotes the replica and grants "k" there. It returns the recorded
// history, the error of the grant made while the replica was cut off, and
// the tokens of that grant and of the grant on the promoted replica.
func failover(t *testing.T, opts ...redisbackend.Option) (history []conformance.Op, pausedErr error, lost, reissued uint64) {
	t.Helper()
	rs := redistest.StartReplicated(t, persistent)
	ctx := context.Background()
	rec := conformance.NewRecorder(nil)
	primary := rec.Wrap(newBackend(t, rs.Primary.Client(noRetries), opts...))
	if _, err := primary.Grant(ctx, req("k", "replicated")); err != nil {
		t.Fatalf("Grant: %v", err)
	}
	if err := primary.Release(ctx, "k", "replicated"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n, err := rs.Primary.Do(ctx, "wait", "1", "10000"); err != nil || n != int64(1) {
		t.Fatalf("WAIT = %v, %v", n, err)
	}
	// Cut the replica off (as a partition would): it points at a port
	// nobody listens on, keeping its data.
	dead, err := serverproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Replica.Do(ctx, "replicaof", "127.0.0.1", dead); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	l, err := primary.Grant(ctx, req("k", "acknowledged"))
	lost, pausedErr = l.Token, err
	rs.Primary.Kill()
	if _, err := rs.Replica.Do(ctx, "replicaof", "no", "one"); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	promoted := rec.Wrap(newBackend(t, rs.Replica.Client()))
	l, err = promoted.Grant(ctx, req("k", "after-failover"))
	if err != nil {
		t.Fatalf("Grant on the promoted replica: %v", err)
	}
	return rec.History(), pausedErr, lost, l.Token
}

// TestFailoverWithoutWaitReissuesToken: without WithMinReplicas, a grant
// the primary acknowledged but had not replicated is lost in a failover,
// and the promoted replica mints its token again, to another holder, while
// the first still holds it: the checker rejects the history. This is the
// hazard docs/redis.md describes, shown.
func TestFailoverWithoutWaitReissuesToken(t *testing.T) {
	history, err, lost, reissued := failover(t)
	if err != nil {
		t.Fatalf("the grant while the replica was cut off: %v, want success (nothing waits for the replica)", err)
	}
	if reissued != lost {
		t.Fatalf("the promoted replica minted token %d; the lost grant had %d (want it reissued: did the replica get the write?)", reissued, lost)
	}
	t.Logf("token %d acknowledged on the primary, then minted again on the promoted replica", lost)
	t.Setenv(conformance.VisualizationDirEnv, t.TempDir())
	if err := conformance.CheckHistory(history, faultTraits()); err == nil {
		t.Fatal("the checker accepted a history with a token minted twice to two live holders")
	}
}

// TestFailoverWithMinReplicas: with WithMinReplicas(1, ...), the grant the
// replica never saw reports an error that wraps ErrOutcomeUnknown (and
// ErrReplication), never plain success (TestMinReplicas covers a
// Coordinator's resends); so the token the promoted replica mints again was never
// relied on, and the history is linearizable.
func TestFailoverWithMinReplicas(t *testing.T) {
	// Patient enough for a loaded machine while the replica is linked.
	history, err, _, reissued := failover(t, redisbackend.WithMinReplicas(1, 2*time.Second))
	if !errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, redisbackend.ErrReplication) {
		t.Fatalf("the unreplicated grant: %v, want ErrOutcomeUnknown and ErrReplication", err)
	}
	t.Logf("the unreplicated grant: %v; the promoted replica minted %d", err, reissued)
	conformance.CheckLinearizable(t, history, faultTraits())
}

// TestSlowReplies: every reply of Redis comes 600ms late (a delaying proxy);
// Deadlines and Hold's context still count from when requests were sent.
func TestSlowReplies(t *testing.T) {
	srv := redistest.Start(t, persistent)
	p := faultproxy.Start(t, srv.Addr(), faultproxy.Hooks{})
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 10 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	b := newBackend(t, client)
	p.SetDelay(600 * time.Millisecond)
	conformance.CheckSlowReplies(t, b, 600*time.Millisecond, 1500*time.Millisecond, 0, func() { p.SetMode(faultproxy.Pause) })
}

// TestServerClockFarOff: a redis-server whose wall clock is hours ahead of
// or behind this process's (an LD_PRELOAD shim shifts its realtime clock).
// Expiry is the server's own business: a lease is live until sent + timeout
// + margin and gone soon after its returned + TTL + margin, as this process
// measures; Deadline counts on the local clock; Inspect's Remaining is the
// time left, not hours; ExpiresAt is on the server's clock. A backend that
// computed expiry from a time the client sends fails here.
func TestServerClockFarOff(t *testing.T) {
	for _, offset := range []time.Duration{3 * time.Hour, -5 * time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			cfg := persistent
			cfg.Env = redistest.ClockShim(t, offset)
			srv := redistest.Start(t, cfg)
			client := srv.Client()
			ctx := context.Background()
			st, err := client.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if skew := st.Sub(time.Now()) - offset; skew.Abs() > 2*time.Second {
				t.Fatalf("the server's TIME is %v off this clock, want %v: the shim does not work", st.Sub(time.Now()), offset)
			}
			b := newBackend(t, client)
			c := fencing.New(b)
			const timeout, margin = 600 * time.Millisecond, 200 * time.Millisecond
			sent := time.Now()
			l, err := c.Grant(ctx, "k", timeout, margin)
			returned := time.Now()
			if err != nil {
				t.Fatalf("Grant: %v", err)
			}
			if l.Deadline.After(returned.Add(timeout)) || l.Deadline.Before(sent.Add(timeout)) {
				t.Fatalf("Deadline %v is not send time + timeout on the local clock", l.Deadline.Sub(sent))
			}
			if d := l.ExpiresAt.Sub(sent) - offset; d < timeout+margin-time.Second || d > timeout+margin+2*time.Second {
				t.Fatalf("ExpiresAt is %v from the local send time, want about %v + the offset %v (the server's clock)", l.ExpiresAt.Sub(sent), timeout+margin, offset)
			}
			ks, err := b.Inspect(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if !ks.Live || ks.Remaining <= 0 || ks.Remaining > timeout+margin {
				t.Fatalf("Inspect = %+v; want live with at most %v remaining", ks, timeout+margin)
			}
			time.Sleep(time.Until(sent.Add(timeout + margin - 100*time.Millisecond)))
			if _, live, err := c.Token(ctx, "k"); err != nil || (!live && time.Now().Before(sent.Add(timeout+margin))) {
				t.Fatalf("Token before the end: live %v, %v", live, err)
			}
			time.Sleep(time.Until(returned.Add(timeout + margin + 50*time.Millisecond)))
			if _, live, err := c.Token(ctx, "k"); err != nil || live {
				t.Fatalf("Token after the end: live %v, %v; want expired", live, err)
			}
			if _, err := c.Renew(ctx, "k", l.ID, timeout, margin); !errors.Is(err, fencing.ErrLeaseExpired) {
				t.Fatalf("Renew after the end: %v, want ErrLeaseExpired", err)
			}
			next, err := c.Grant(ctx, "k", timeout, margin)
			if err != nil || next.Token != l.Token+1 {
				t.Fatalf("next grant = %+v, %v; want token %d", next, err, l.Token+1)
			}
		})
	}
}

// TestReadsThroughReplicaRoutingClient: the backend over a go-redis client
// that sends read-only commands to replicas (a Sentinel cluster client with
// RouteRandomly) while the replica is cut off from its primary, so that its
// data is stale: Token right after each grant and release still reports
// the primary's state. A token check sent as a read-only command (EVALSHA_RO,
// which such clients route to replicas) fails here.
func TestReadsThroughReplicaRoutingClient(t *testing.T) {
	rs := redistest.StartReplicated(t, persistent)
	sentinel := redistest.StartSentinel(t, "fencing-primary", rs.Primary)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := redis.NewFailoverClusterClient(&redis.FailoverOptions{
		MasterName:    "fencing-primary",
		SentinelAddrs: []string{sentinel.Addr()},
		RouteRandomly: true,
	})
	defer client.Close()
	// Wait until the client knows the replica, then cut the replica off.
	for {
		n := 0
		client.ForEachSlave(ctx, func(context.Context, *redis.Client) error { n++; return nil })
		if n > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the client never learned of the replica")
		}
		time.Sleep(100 * time.Millisecond)
	}
	b := newBackend(t, client)
	dead, err := serverproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Replica.Do(ctx, "replicaof", "127.0.0.1", dead); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	for i := range 10 {
		id := fmt.Sprint("L", i)
		l, err := b.Grant(ctx, req("k", id))
		if err != nil {
			t.Fatalf("Grant: %v", err)
		}
		if tok, live, err := b.Token(ctx, "k"); err != nil || !live || tok != l.Token {
			t.Fatalf("Token right after grant %d = %d, %v, %v; want %d, true (a stale replica answered?)", i, tok, live, err, l.Token)
		}
		mustRelease(t, b, "k", id)
		if _, live, err := b.Token(ctx, "k"); err != nil || live {
			t.Fatalf("Token right after release %d: live %v, %v; want not live", i, live, err)
		}
	}
}
