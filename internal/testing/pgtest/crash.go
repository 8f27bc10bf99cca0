package pgtest

import (
	"syscall"
	"testing"
)

// Crash stops the server as `pg_ctl stop -m immediate` does: SIGQUIT to the
// postmaster, which ends every backend at once without a checkpoint, so the
// next start runs crash recovery from the WAL. It waits for the exit.
func (s *Server) Crash() { s.signal(syscall.SIGQUIT) }

// Restart starts a stopped or crashed server again on the same port and
// data directory, and waits until it accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.proc != nil {
		t.Fatalf("pgtest: Restart of a running server")
	}
	if err := s.start(s.bin, s.cred); err != nil {
		t.Fatalf("pgtest: restart: %v", err)
	}
}
