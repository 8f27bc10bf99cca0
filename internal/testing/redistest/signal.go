package redistest

import (
	"fmt"
	"syscall"
)

// Pause freezes the server's process with SIGSTOP: it keeps its connections
// and reads nothing until Resume, when it runs what arrived meanwhile (so a
// call that timed out during the pause may take effect after it). Kill and
// Restart still work on a paused server.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a server frozen by Pause (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("redistest: %v: the server on %s is not running", sig, s.Addr())
	}
	return s.proc.Signal(sig)
}
