package pgtest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// StartReplica makes a streaming replica of primary with pg_basebackup and
// runs it on a free loopback port, streaming from upstream (host:port): the
// primary's own address, or a proxy in front of it, so a test can cut the
// replica off. The replica is durable (fsync on), and is stopped and
// removed when t ends.
func StartReplica(t testing.TB, primary *Server, upstream string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(upstream)
	if err != nil {
		t.Fatalf("pgtest: upstream %q: %v", upstream, err)
	}
	dir, err := os.MkdirTemp("", "pgtest-replica-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if primary.cred != nil {
		if err := os.Chown(dir, int(primary.cred.Uid), int(primary.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	s := &Server{dir: dir, durable: true, bin: primary.bin, cred: primary.cred}
	backup := exec.Command(filepath.Join(primary.bin, "pg_basebackup"),
		"-D", s.dataDir(), "-R", "-X", "stream", "-c", "fast",
		"-d", "host="+host+" port="+port+" user=postgres application_name=replica")
	if out, err := run(backup, dir, s.cred); err != nil {
		t.Fatalf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	t.Cleanup(s.Stop)
	if err := s.startOnFreePort(); err != nil {
		t.Fatalf("pgtest: replica: %v", err)
	}
	return s
}

// Promote makes a replica the primary (pg_promote) and waits until it
// accepts writes.
func (s *Server) Promote(t testing.TB) {
	t.Helper()
	db := s.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var ok bool
	if err := db.QueryRowContext(ctx, "SELECT pg_promote(true, 30)").Scan(&ok); err != nil || !ok {
		t.Fatalf("pgtest: pg_promote = %v, %v", ok, err)
	}
	for {
		var standby bool
		if err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err == nil && !standby {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pgtest: still in recovery after promotion")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
