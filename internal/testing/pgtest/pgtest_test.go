package pgtest

import (
	"context"
	"syscall"
	"testing"
)

func TestStartStop(t *testing.T) {
	s := Start(t)
	var version string
	if err := s.DB(t).QueryRowContext(context.Background(), "SHOW server_version").Scan(&version); err != nil {
		t.Fatalf("query: %v", err)
	}
	t.Logf("PostgreSQL %s on port %d, PID %d", version, s.Port(), s.PID())
	pid := s.PID()
	s.Stop()
	if s.PID() != 0 {
		t.Errorf("PID after Stop = %d, want 0", s.PID())
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("postmaster %d still exists after Stop (kill 0: %v)", pid, err)
	}
	s.Stop() // a second Stop does nothing
}
