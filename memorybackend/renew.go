package memorybackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	h, s := b.locate(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, found := s.find(h, req.Key)
	if !found {
		return backend.Lease{}, backend.ErrLeaseNotFound
	}
	r := s.record(ref)
	l := s.lease(r.state())
	if l == nil {
		if r.state() == stateExpired && r.fingerprint() == b.fingerprint(req.LeaseID) {
			return backend.Lease{}, backend.ErrLeaseExpired
		}
		return backend.Lease{}, backend.ErrLeaseNotFound
	}
	if l.id != req.LeaseID {
		return backend.Lease{}, backend.ErrLeaseNotFound
	}
	now := b.now()
	if now >= l.expires {
		if l.forced() { // forced out, in its lock delay
			return backend.Lease{}, backend.ErrLeaseNotFound
		}
		return backend.Lease{}, backend.ErrLeaseExpired
	}
	l.ttl, l.margin = req.Timeout, req.Margin
	l.expires = now + int64(req.Timeout+req.Margin)
	return b.leaseOf(req.Key, r.token(), l), nil
}
