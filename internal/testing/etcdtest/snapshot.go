package etcdtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SaveSnapshot writes a snapshot of cli's cluster (Maintenance.Snapshot) to
// path, as etcdctl snapshot save does.
func SaveSnapshot(ctx context.Context, cli *clientv3.Client, path string) error {
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("etcdtest: snapshot: %w", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("etcdtest: snapshot: %w", err)
	}
	return f.Close()
}

// Restore stops the single member m, replaces its data with the snapshot at
// path (etcdutl snapshot restore, into a new data directory) and starts it
// again on the same ports, so its clients reconnect to the restored server.
// With bump > 0 the restore raises the revision by bump and marks it
// compacted, as --bump-revision bump --mark-compacted does.
func (m *Member) Restore(path string, bump uint64) error {
	bin, err := etcdutlBin()
	if err != nil {
		return err
	}
	m.Stop()
	dir := fmt.Sprintf("%s-restored-%d", m.dir, bump)
	args := []string{"snapshot", "restore", path,
		"--name=" + m.Name, "--data-dir=" + dir,
		"--initial-advertise-peer-urls=" + m.peerURL,
		"--initial-cluster=" + m.cluster, "--initial-cluster-token=etcdtest"}
	if bump > 0 {
		args = append(args, fmt.Sprintf("--bump-revision=%d", bump), "--mark-compacted")
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("etcdtest: restore: %w\n%s", err, out)
	}
	m.mu.Lock()
	m.dir = dir
	m.mu.Unlock()
	return m.Start()
}
