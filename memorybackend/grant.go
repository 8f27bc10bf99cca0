package memorybackend

import (
	"context"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Grant implements backend.Backend.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	h, s := b.locate(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := b.now()
	ref, found := s.find(h, req.Key)
	var last uint64
	if found {
		r := s.record(ref)
		last = r.token()
		if l := s.lease(r.state()); l != nil {
			if l.id == req.LeaseID { // a retry of the grant that made this lease
				switch {
				case now < l.expires:
					return b.leaseOf(req.Key, last, l), nil
				case l.forced():
					return backend.Lease{}, backend.ErrLeaseNotFound
				}
				return backend.Lease{}, backend.ErrLeaseExpired
			}
			if now < l.expires {
				return backend.Lease{}, &backend.HeldError{Remaining: time.Duration(l.expires-now) + l.delay}
			}
			if end := l.delayEnd(); now < end {
				return backend.Lease{}, &backend.HeldError{Remaining: time.Duration(end - now), Delayed: true}
			}
			s.end(ref, l.endState(), b.idSeed) // reads as before: expired or released
		} else if r.fingerprint() == b.fingerprint(req.LeaseID) { // a retry, after the lease ended
			if r.state() == stateReleased {
				return backend.Lease{}, backend.ErrLeaseNotFound
			}
			return backend.Lease{}, backend.ErrLeaseExpired
		}
	}
	if last >= b.maxToken {
		return backend.Lease{}, backend.ErrTokenSpaceExhausted
	}
	if !found {
		ref = s.insert(h, req.Key, 0, stateReleased)
	}
	state := s.addLive(liveLease{
		id:      req.LeaseID,
		owner:   req.Owner,
		expires: now + int64(req.Timeout+req.Margin),
		ttl:     req.Timeout,
		margin:  req.Margin,
		delay:   req.LockDelay,
		ref:     ref,
	}, now, b.idSeed)
	r := s.record(ref)
	r.setToken(last + 1)
	r.setState(state)
	return b.leaseOf(req.Key, last+1, s.lease(state)), nil
}
