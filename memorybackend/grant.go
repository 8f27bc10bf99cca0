package memorybackend

import (
	"context"
	"slices"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Grant implements backend.Backend.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	h, s := b.locate(req.Key)
	s.mu.Lock()
	now := b.now()
	at, l, done, err := b.checkGrant(s, h, req, now)
	if !done && err == nil {
		l = b.applyGrant(s, h, at, req, now)
	}
	s.mu.Unlock()
	b.sweep.drive(b, now)
	return l, err
}

// GrantMany implements backend.MultiGranter: it locks the shards of reqs'
// keys in shard order (two calls over overlapping sets take their common
// shards in one order, so neither waits on the other in a cycle), checks
// every key in key order, and grants only when none refuses.
func (b *Backend) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckMany(reqs)); err != nil {
		return nil, err
	}
	hashes := make([]uint64, len(reqs))
	shards := make([]*shard, len(reqs))
	idx := make([]uint64, 0, len(reqs))
	for i, r := range reqs {
		hashes[i], shards[i] = b.locate(r.Key)
		idx = append(idx, hashes[i]>>b.shardShift)
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		b.shards[i].mu.Lock()
	}
	now := b.now()
	leases, err := b.grantMany(reqs, hashes, shards, now)
	for _, i := range idx {
		b.shards[i].mu.Unlock()
	}
	b.sweep.drive(b, now)
	return leases, err
}

// grantMany is GrantMany's work at now, with the shards of reqs' keys
// locked.
func (b *Backend) grantMany(reqs []backend.Request, hashes []uint64, shards []*shard, now int64) ([]backend.Lease, error) {
	leases := make([]backend.Lease, len(reqs))
	held := make([]bool, len(reqs)) // a retry: the key's lease is already this request's
	at := make([]recordAt, len(reqs))
	for _, i := range backend.KeyOrder(reqs) {
		var err error
		at[i], leases[i], held[i], err = b.checkGrant(shards[i], hashes[i], reqs[i], now)
		if err != nil {
			return nil, &backend.ManyError{Index: i, Err: err}
		}
	}
	for i, r := range reqs {
		if !held[i] {
			leases[i] = b.applyGrant(shards[i], hashes[i], at[i], r, now)
		}
	}
	return leases, nil
}

// recordAt is where checkGrant found a key's record, for applyGrant.
type recordAt struct {
	ref   uint32
	found bool
	floor uint64 // when not found: the floor the key's first token is above
}

// checkGrant decides a grant of req, whose key's hash is h, on shard s
// (locked) at now: an error when it is refused, the lease with done set
// when req is a retry of the grant that made the key's live lease, or
// neither when applyGrant is to grant it, at the record it returns. It
// changes nothing a reader can see (it may end a lease whose time and lock
// delay are over, which reads as before), and no record moves before
// applyGrant.
func (b *Backend) checkGrant(s *shard, h uint64, req backend.Request, now int64) (at recordAt, l backend.Lease, done bool, err error) {
	ref, found := s.find(h, req.Key)
	at = recordAt{ref: ref, found: found}
	if !found {
		// The key's first token, or its first since it was reclaimed, is
		// above the floor (read once: another shard's sweep may raise it).
		at.floor = b.floor.Load()
		if at.floor >= b.maxToken {
			return at, backend.Lease{}, false, backend.ErrTokenSpaceExhausted
		}
		return at, backend.Lease{}, false, nil
	}
	r := s.record(ref)
	last := r.token()
	if l := s.lease(r.state()); l != nil {
		if l.id == req.LeaseID { // a retry of the grant that made this lease
			switch {
			case now < l.expires:
				return at, b.leaseOf(req.Key, last, l), true, nil
			case l.forced():
				return at, backend.Lease{}, false, backend.ErrLeaseNotFound
			}
			return at, backend.Lease{}, false, backend.ErrLeaseExpired
		}
		if now < l.expires {
			return at, backend.Lease{}, false, &backend.HeldError{Remaining: time.Duration(l.expires-now) + l.delay}
		}
		if end := l.delayEnd(); now < end {
			return at, backend.Lease{}, false, &backend.HeldError{Remaining: time.Duration(end - now), Delayed: true}
		}
		s.end(ref, l.endState(), l.delayEnd(), b.idSeed) // reads as before: expired or released
	} else if r.fingerprint() == b.fingerprint(req.LeaseID) { // a retry, after the lease ended
		if r.state() == stateReleased {
			return at, backend.Lease{}, false, backend.ErrLeaseNotFound
		}
		return at, backend.Lease{}, false, backend.ErrLeaseExpired
	}
	if last >= b.maxToken {
		return at, backend.Lease{}, false, backend.ErrTokenSpaceExhausted
	}
	return at, backend.Lease{}, false, nil
}

// applyGrant grants req, which checkGrant let through, on shard s (locked).
func (b *Backend) applyGrant(s *shard, h uint64, at recordAt, req backend.Request, now int64) backend.Lease {
	ref := at.ref
	if !at.found {
		// A key with no record starts above every token of every key
		// reclaimed so far, its own earlier ones among them.
		ref = s.insert(h, req.Key, at.floor, stateReleased, now)
	}
	last := s.record(ref).token()
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
	return b.leaseOf(req.Key, last+1, s.lease(state))
}
