package memorybackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx, backend.CheckRelease(key, leaseID)); err != nil {
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
	now := b.now()
	if now >= l.expires {
		if l.forced() { // forced out, in its lock delay: reads as released
			return nil
		}
		if now >= l.delayEnd() {
			s.end(ref, stateExpired, l.delayEnd(), b.idSeed) // reads as before: expired
		}
		return backend.ErrLeaseExpired // an expiry is not a release: the delay stays
	}
	s.end(ref, stateReleased, now, b.idSeed) // a release by the holder: no delay
	s.notify(key)
	return nil
}

// ForceRelease implements backend.ForceReleaser. The old holder's release
// then returns nil (its lease reads as released) and its renewals get
// backend.ErrLeaseNotFound. A lease with a lock delay keeps its key closed
// for that delay from now.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
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
	now := b.now()
	if l == nil || now >= l.expires {
		return false, nil
	}
	if l.forceEnd(now) {
		s.end(ref, stateReleased, now, b.idSeed)
	}
	s.notify(key)
	return true, nil
}
