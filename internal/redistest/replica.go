package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated is a primary redis-server with one replica, both child
// processes on free loopback ports with their own temporary directories,
// stopped in the test's cleanup.
type Replicated struct {
	// PrimaryAddr and ReplicaAddr are host:port addresses.
	PrimaryAddr, ReplicaAddr string
	primary, replica         *proc
}

// StartReplicated starts a primary and a replica of it (--replicaof) and
// waits until the replica is linked and the primary counts it as online.
// Without redis-server it skips tb, or fails it when the environment
// variable CI is set.
func StartReplicated(tb testing.TB) *Replicated {
	tb.Helper()
	p := startProc(tb, "--repl-diskless-sync-delay", "0")
	r := startProc(tb, "--replicaof", p.host, p.port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitLinked(ctx, p.addr, r.addr); err != nil {
		tb.Fatalf("redistest: replica %s of %s: %v", r.addr, p.addr, err)
	}
	return &Replicated{PrimaryAddr: p.addr, ReplicaAddr: r.addr, primary: p, replica: r}
}

// StopReplica kills the replica process at once (SIGKILL) and waits for it
// to exit, so that the primary's WAIT can no longer be acknowledged.
func (r *Replicated) StopReplica(tb testing.TB) {
	tb.Helper()
	r.replica.kill()
}

// waitLinked polls until the replica reports master_link_status:up and the
// primary lists one replica in state online.
func waitLinked(ctx context.Context, primaryAddr, replicaAddr string) error {
	p := redis.NewClient(&redis.Options{Addr: primaryAddr})
	defer p.Close()
	r := redis.NewClient(&redis.Options{Addr: replicaAddr})
	defer r.Close()
	var pInfo, rInfo string
	for {
		pInfo, _ = p.Info(ctx, "replication").Result()
		rInfo, _ = r.Info(ctx, "replication").Result()
		if strings.Contains(rInfo, "master_link_status:up") &&
			strings.Contains(pInfo, "connected_slaves:1") &&
			strings.Contains(pInfo, "state=online") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not linked: %w; primary:\n%s\nreplica:\n%s", ctx.Err(), pInfo, rInfo)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
