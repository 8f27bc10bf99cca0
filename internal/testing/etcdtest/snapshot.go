package etcdtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
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
	m.Stop()
	dir := filepath.Join(filepath.Dir(m.dir), filepath.Base(m.dir)+fmt.Sprintf("-restored-%d", bump))
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                m.Name,
		OutputDataDir:       dir,
		PeerURLs:            []string{m.peerURL},
		InitialCluster:      m.cluster,
		InitialClusterToken: "etcdtest",
		RevisionBump:        bump,
		MarkCompacted:       bump > 0,
	})
	if err != nil {
		return fmt.Errorf("etcdtest: restore: %w", err)
	}
	m.mu.Lock()
	m.dir = dir
	m.mu.Unlock()
	if err := m.Start(); err != nil {
		return err
	}
	return m.waitReady()
}
