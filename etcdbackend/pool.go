package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reusing etcd leases.
//
// LeaseGrant and LeaseRevoke are raft proposals each, as costly as a Txn; a
// keep-alive is not (the leader answers it after confirming its leadership,
// without a log entry). So an etcd lease that no key uses any more is kept
// for the next grant asking for the same seconds, which renews it with one
// keep-alive instead of granting a new one, and the release that freed it
// does not revoke it.
//
// The rule that makes it safe: an etcd lease enters the pool only when this
// backend knows it has no key attached, and from then on only the pool hands
// it out, to one grant at a time:
//
//   - after a Txn of ours deleted the record attached to it (Release, of a
//     lease key and its delay record; Dequeue, of a line entry: the
//     response's previous value names the etcd lease, and exactly one Txn can
//     delete a given record, so exactly one backend, whichever process
//     granted the lease, gets to keep its etcd lease). Only one record is
//     ever attached to these etcd leases, because only a grant Txn, a forced
//     release's Txn and Enqueue's Txn attach one, to an etcd lease they got
//     from LeaseGrant or from the pool, and a renewal that moves a record
//     does so onto a fresh etcd lease;
//   - after a grant's Txn answered that it attached nothing (key held, or a
//     resent grant).
//
// Never after a Txn whose answer was lost (it may have attached the key), nor
// after ForceRelease (its holder may still be renewing that etcd lease).
//
// A pooled lease's TTL keeps running, and it may have run out, or been
// revoked. A grant that takes one first renews it with a keep-alive, whose
// send time starts the lease's ExpiresAt: the leader restarts its expiry
// clock at the keep-alive, with the lease's full TTL. etcd refuses to renew a
// lease whose TTL ran out (also before it has revoked it), so a lease that
// expired in the pool can never come back; the grant drops it and takes
// another, or grants a new one. The pool is bounded, and Close revokes what
// it holds.

// poolSize bounds the etcd leases a backend keeps unused.
const poolSize = 64

// pool holds unused etcd leases by the seconds they were asked for, most
// recently freed last.
type pool struct {
	mu     sync.Mutex
	free   map[int64][]pooled
	n      int
	closed bool
}

type pooled struct {
	id      clientv3.LeaseID
	granted int64     // seconds of its TTL
	freed   time.Time // local time its last key was detached, or later
}

// put adds an unused etcd lease, asked for asked seconds and granted
// granted; it reports false when the pool is full or closed, and the caller
// then revokes the lease.
func (p *pool) put(id clientv3.LeaseID, asked, granted int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.n >= poolSize {
		return false
	}
	if p.free == nil {
		p.free = make(map[int64][]pooled)
	}
	p.free[asked] = append(p.free[asked], pooled{id: id, granted: granted, freed: time.Now()})
	p.n++
	return true
}

// take removes and returns the most recently freed lease asked for asked
// seconds. It drops the leases freed longer than their TTL ago, which have
// almost surely run out (only a leader change since can have extended them):
// dropping a lease with no key is always safe, it ends by itself.
func (p *pool) take(asked int64) (clientv3.LeaseID, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	s := p.free[asked]
	for len(s) > 0 {
		e := s[len(s)-1]
		s = s[:len(s)-1]
		p.n--
		if now.Sub(e.freed) < time.Duration(e.granted)*time.Second {
			p.free[asked] = s
			return e.id, true
		}
	}
	delete(p.free, asked)
	return 0, false
}

// drain closes the pool and returns the leases it held.
func (p *pool) drain() []clientv3.LeaseID {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var ids []clientv3.LeaseID
	for _, s := range p.free {
		for _, e := range s {
			ids = append(ids, e.id)
		}
	}
	p.free, p.n = nil, 0
	return ids
}

// etcdLease is the etcd lease a grant attaches its key to.
type etcdLease struct {
	id  clientv3.LeaseID
	ttl int64     // its TTL in seconds
	set time.Time // local time just before the request that set its TTL was sent
}

// acquire returns a live etcd lease of at least asked seconds with nothing
// attached, renewed from the pool or newly granted. An error means no grant
// was sent.
func (b *Backend) acquire(ctx context.Context, asked int64) (etcdLease, error) {
	for {
		id, ok := b.pool.take(asked)
		if !ok {
			break
		}
		set := time.Now()
		ttl, err := b.keeper.renew(ctx, id)
		if errors.Is(err, errNoStream) {
			set = time.Now()
			ttl, _, err = b.keepAliveOnce(ctx, id)
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			continue // it ran out in the pool
		}
		if err != nil {
			// The lease has no key and ends by itself.
			return etcdLease{}, fmt.Errorf("etcdbackend: lease keep-alive: %w", err)
		}
		if ttl < asked {
			b.revoke(ctx, id) // cannot happen: etcd never shortens a TTL
			continue
		}
		return etcdLease{id: id, ttl: ttl, set: set}, nil
	}
	set := time.Now()
	lg, err := b.cli.Grant(ctx, asked)
	if err != nil {
		// Nothing refers to the etcd lease, if one was made: the grant did
		// not happen.
		return etcdLease{}, fmt.Errorf("etcdbackend: lease grant: %w", err)
	}
	return etcdLease{id: lg.ID, ttl: lg.TTL, set: set}, nil
}

// recycle gives back an etcd lease that has no key attached (see the rules
// above), or revokes it when the pool is full or closed.
func (b *Backend) recycle(ctx context.Context, id clientv3.LeaseID, asked, granted int64) {
	if !b.pool.put(id, asked, granted) {
		b.revoke(ctx, id)
	}
}

// recycleDeleted recycles the etcd lease of the record (a lease key, a
// delay record or a line entry) that a Txn's delete-with-previous-value op
// removed.
func (b *Backend) recycleDeleted(ctx context.Context, op *pb.ResponseOp) {
	prev := op.GetResponseDeleteRange().GetPrevKvs()
	if len(prev) != 1 || prev[0].Lease == 0 {
		return
	}
	id := clientv3.LeaseID(prev[0].Lease)
	asked, granted, err := leaseSeconds(b.prefix, prev[0])
	if err != nil {
		b.revoke(ctx, id)
		return
	}
	b.recycle(ctx, id, asked, granted)
}

// closeTimeout bounds how long Close waits for the revokes of pooled leases;
// a lease it could not revoke has no key and ends by itself.
const closeTimeout = 2 * time.Second

// drainPool revokes the pooled leases, all at once.
func (b *Backend) drainPool() {
	ids := b.pool.drain()
	if len(ids) == 0 || b.cli.Ctx().Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { b.revoke(ctx, id) })
	}
	wg.Wait()
}
