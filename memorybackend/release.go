package memorybackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	h, s := b.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, found := s.find(h, key)
	if !found {
		return backend.ErrLeaseNotFound
	}
	r := s.record(ref)
	l := s.lease(r.state())
	if l == nil {
		if r.fingerprint() != b.fingerprint(leaseID) {
			return backend.ErrLeaseNotFound
		}
		if r.state() == stateReleased {
			return nil // released already: a resent release is harmless
		}
		return backend.ErrLeaseExpired
	}
	if l.id != leaseID {
		return backend.ErrLeaseNotFound
	}
	if b.now() >= l.expires {
		s.end(ref, stateExpired, b.idSeed) // reads as before: expired
		return backend.ErrLeaseExpired
	}
	s.end(ref, stateReleased, b.idSeed)
	s.notify(key)
	return nil
}

// ForceRelease implements backend.ForceReleaser. The old holder's release
// then returns nil (its lease reads as released) and its renewals get
// backend.ErrLeaseNotFound.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx); err != nil {
		return false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return false, err
	}
	h, s := b.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, found := s.find(h, key)
	if !found {
		return false, nil
	}
	l := s.lease(s.record(ref).state())
	if l == nil || b.now() >= l.expires {
		return false, nil
	}
	s.end(ref, stateReleased, b.idSeed)
	s.notify(key)
	return true, nil
}
