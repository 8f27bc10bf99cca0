package recipetest

import (
	"context"
	"sync"

	"github.com/fencing-go/fencing/backend"
)

// Stallable wraps a backend so that a test can stall its process's traffic:
// while stalled, every request waits (until Resume, or until its context
// ends) before it reaches the store, as the requests of a process that
// stopped, or of one cut off by a proxy that holds every byte, do. Only the
// core SPI goes through; a Coordinator over it polls while waiting.
type Stallable struct {
	backend.Backend
	mu     sync.Mutex
	resume chan struct{} // closed when not stalled
}

// NewStallable returns b, not stalled.
func NewStallable(b backend.Backend) *Stallable {
	s := &Stallable{Backend: b, resume: make(chan struct{})}
	close(s.resume)
	return s
}

// Stall makes every request wait from now on.
func (s *Stallable) Stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.resume:
		s.resume = make(chan struct{})
	default:
	}
}

// Resume lets the waiting and later requests through.
func (s *Stallable) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.resume:
	default:
		close(s.resume)
	}
}

func (s *Stallable) wait(ctx context.Context) error {
	s.mu.Lock()
	resume := s.resume
	s.mu.Unlock()
	select {
	case <-resume:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Grant waits while stalled, then grants.
func (s *Stallable) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := s.wait(ctx); err != nil {
		return backend.Lease{}, err
	}
	return s.Backend.Grant(ctx, req)
}

// Renew waits while stalled, then renews.
func (s *Stallable) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := s.wait(ctx); err != nil {
		return backend.Lease{}, err
	}
	return s.Backend.Renew(ctx, req)
}

// Release waits while stalled, then releases.
func (s *Stallable) Release(ctx context.Context, key, leaseID string) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Backend.Release(ctx, key, leaseID)
}

// Token waits while stalled, then reads the token.
func (s *Stallable) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := s.wait(ctx); err != nil {
		return 0, false, err
	}
	return s.Backend.Token(ctx, key)
}
