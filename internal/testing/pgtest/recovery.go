package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// ArchiveDir is where a server started with Config.Archive archives its
// WAL (the directory is made at start).
func (s *Server) ArchiveDir() string { return filepath.Join(s.dir, "archive") }

// Backup is a base backup of a server (pg_basebackup), for StartRecovery.
type Backup struct {
	from *Server
	dir  string
}

// BaseBackup takes a base backup of s, with the WAL that makes it
// consistent, into a new directory removed when t ends.
func BaseBackup(t testing.TB, s *Server) *Backup {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgtest-backup-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(filepath.Join(s.bin, "pg_basebackup"), "-D", data, "-X", "stream", "-c", "fast",
		"-d", "host=127.0.0.1 port="+strconv.Itoa(s.port)+" user=postgres")
	if out, err := run(cmd, dir, s.cred); err != nil {
		t.Fatalf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	return &Backup{from: s, dir: data}
}

// StartRecovery starts a new server from a copy of backup and recovers it
// to the end of the backup (recovery_target = 'immediate'), reading the
// archive of the server it was taken from, then promotes it: a
// point-in-time recovery, which starts a new timeline. It waits until the
// server accepts writes, and stops it (and removes its directory) when t
// ends.
func StartRecovery(t testing.TB, backup *Backup) *Server {
	t.Helper()
	from := backup.from
	dir, err := os.MkdirTemp("", "pgtest-recovered-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if from.cred != nil {
		if err := os.Chown(dir, int(from.cred.Uid), int(from.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	s := &Server{dir: dir, durable: true, bin: from.bin, cred: from.cred}
	cp := exec.Command("cp", "-a", backup.dir, s.dataDir())
	if out, err := run(cp, dir, s.cred); err != nil {
		t.Fatalf("pgtest: copy the backup: %v\n%s", err, out)
	}
	conf := "restore_command = 'cp " + from.ArchiveDir() + "/%f %p'\n" +
		"recovery_target = 'immediate'\nrecovery_target_action = 'promote'\narchive_mode = off\n"
	f, err := os.OpenFile(filepath.Join(s.dataDir(), "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(s.dataDir(), "recovery.signal"), nil, 0o600)
	}
	if err == nil && s.cred != nil {
		err = os.Chown(filepath.Join(s.dataDir(), "recovery.signal"), int(s.cred.Uid), int(s.cred.Gid))
	}
	if err != nil {
		t.Fatalf("pgtest: recovery settings: %v", err)
	}
	t.Cleanup(s.Stop)
	if err := s.startOnFreePort(); err != nil {
		t.Fatalf("pgtest: recovery: %v", err)
	}
	s.waitPrimary(t)
	return s
}

// waitPrimary waits until s is out of recovery.
func (s *Server) waitPrimary(t testing.TB) {
	t.Helper()
	db := s.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		var standby bool
		if err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err == nil && !standby {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pgtest: still in recovery")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
