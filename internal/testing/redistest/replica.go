package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Replicated is a primary redis-server with one replica, both Servers,
// stopped when the test ends.
type Replicated struct {
	Primary, Replica *Server
}

// StartReplicated starts a primary and a replica of it (--replicaof), both
// running as cfg says (persistence, Args; cfg.Dir and cfg.Port must be
// empty), and waits until the replica's link is up and the primary counts it
// online. Kill the Replica to make the primary's WAIT time out. Like Start,
// it skips the test without redis-server, or fails it in CI.
func StartReplicated(t testing.TB, cfg Config) *Replicated {
	t.Helper()
	if cfg.Dir != "" || cfg.Port != 0 {
		t.Fatalf("redistest: StartReplicated: cfg.Dir and cfg.Port must be empty")
	}
	primary, replica := cfg, cfg
	// A diskless full sync starts at once instead of after 5 s.
	primary.Args = append([]string{"--repl-diskless-sync-delay", "0"}, cfg.Args...)
	p := Start(t, primary)
	replica.Args = append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(p.Port())}, cfg.Args...)
	r := Start(t, replica)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitLinked(ctx, p, r); err != nil {
		t.Fatalf("redistest: replica %s of %s: %v", r.Addr(), p.Addr(), err)
	}
	// After the first sync an append-only replica rewrites its AOF, and until
	// then it may acknowledge late: wait it out, then for one acknowledged
	// write, so the test starts from a replica that keeps up.
	if err := waitRewritten(ctx, r); err != nil {
		t.Fatalf("redistest: replica %s: %v", r.Addr(), err)
	}
	if n, err := p.Do(ctx, "wait", "1", "10000"); err != nil || n != int64(1) {
		t.Fatalf("redistest: replica %s does not acknowledge: WAIT = %v, %v", r.Addr(), n, err)
	}
	return &Replicated{Primary: p, Replica: r}
}

// waitLinked polls INFO replication until the replica reports
// master_link_status:up and the primary lists one replica, online.
func waitLinked(ctx context.Context, p, r *Server) error {
	var pInfo, rInfo string
	for {
		pv, perr := p.Do(ctx, "info", "replication")
		rv, rerr := r.Do(ctx, "info", "replication")
		pInfo, _ = pv.(string)
		rInfo, _ = rv.(string)
		if perr == nil && rerr == nil &&
			hasLines(rInfo, []string{"master_link_status:up"}) &&
			hasLines(pInfo, []string{"connected_slaves:1"}) &&
			hasOnlineReplica(pInfo) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not linked: %w; primary:\n%s\nreplica:\n%s", ctx.Err(), pInfo, rInfo)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitRewritten polls INFO persistence until no AOF rewrite is running or
// scheduled on s.
func waitRewritten(ctx context.Context, s *Server) error {
	var info string
	for {
		v, err := s.Do(ctx, "info", "persistence")
		info, _ = v.(string)
		if err == nil && hasLines(info, []string{"aof_rewrite_in_progress:0", "aof_rewrite_scheduled:0"}) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("AOF rewrite still running: %w\n%s", ctx.Err(), info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// hasOnlineReplica reports whether INFO replication lists a replica in
// state online (slave0:ip=...,state=online,...).
func hasOnlineReplica(info string) bool {
	for line := range strings.Lines(info) {
		if strings.HasPrefix(line, "slave0:") && strings.Contains(line, "state=online") {
			return true
		}
	}
	return false
}
