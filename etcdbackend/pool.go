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
// revoked. A grant that takes one renews it with a keep-alive, whose send
// time starts the lease's ExpiresAt: the leader restarts its expiry clock at
// the keep-alive, with the lease's full TTL. etcd refuses to renew a lease
// whose TTL ran out (also before it has revoked it), so a lease that expired
// in the pool can never come back; the grant drops it and takes another, or
// grants a new one. The pool is bounded, and Close revokes what it holds.
//
// The keep-alive and the grant's Txn go out together, without waiting for
// each other (one round trip instead of two), when the lease surely has
// time left: this backend set its TTL (granted it, or renewed it for a
// grant) less than half its TTL ago. The Txn then attaches the key to a live
// lease, and the keep-alive, answered before the grant returns, restarts
// its clock as above; if it finds the lease gone after all, the grant's
// outcome is unknown (the key is attached to a lease etcd ends), and a
// resend answers it. A lease whose TTL was set longer ago, or elsewhere (by
// another process's grant that this backend released), is renewed first,
// as before.

// poolSize bounds the etcd leases a backend keeps unused.
const poolSize = 64

// pool holds unused etcd leases by the seconds they were asked for, most
// recently freed last.
type pool struct {
	mu     sync.Mutex
	free   map[int64][]pooled
	n      int
	closed bool
	// set is when this backend last set the TTL of the etcd leases its
	// grants attached a key to (local time just before the request was
	// sent), until they come back to the pool; bounded by maxSet.
	set map[clientv3.LeaseID]time.Time
}

// maxSet bounds pool.set: the leases of keys that expire, are renewed or
// are released by another process never come back, so the map is emptied
// when it reaches this size (their grants then renew first, as before).
const maxSet = 4096

type pooled struct {
	id      clientv3.LeaseID
	granted int64     // seconds of its TTL
	freed   time.Time // local time its last key was detached, or later
	set     time.Time // local time before its TTL was last set; zero if unknown
}

// granted records that a grant attached a key to etcd lease id, whose TTL
// was set by a request sent after set.
func (p *pool) granted(id clientv3.LeaseID, set time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.set == nil || len(p.set) >= maxSet {
		p.set = make(map[clientv3.LeaseID]time.Time)
	}
	p.set[id] = set
}

// put adds an unused etcd lease, asked for asked seconds and granted
// granted, its TTL set after set (zero: when is unknown, see granted); it
// reports false when the pool is full or closed, and the caller then
// revokes the lease.
func (p *pool) put(id clientv3.LeaseID, asked, granted int64, set time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.set[id]; ok {
		delete(p.set, id)
		if set.IsZero() {
			set = s
		}
	}
	if p.closed || p.n >= poolSize {
		return false
	}
	if p.free == nil {
		p.free = make(map[int64][]pooled)
	}
	p.free[asked] = append(p.free[asked], pooled{id: id, granted: granted, freed: time.Now(), set: set})
	p.n++
	return true
}

// take removes and returns the most recently freed lease asked for asked
// seconds. It drops the leases freed longer than their TTL ago, which have
// almost surely run out (only a leader change since can have extended them):
// dropping a lease with no key is always safe, it ends by itself.
func (p *pool) take(asked int64) (pooled, bool) {
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
			return e, true
		}
	}
	delete(p.free, asked)
	return pooled{}, false
}

// drain closes the pool and returns the leases it held.
func (p *pool) drain() []clientv3.LeaseID {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.set = nil
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
	// renewing is the keep-alive that sets its TTL, sent but not yet
	// answered (see acquire); nil once answered.
	renewing *keepAlive
}

// acquire returns a live etcd lease of at least asked seconds with nothing
// attached, renewed from the pool or newly granted. An error means no grant
// was sent. With early set, a pooled lease whose TTL this backend set less
// than half its TTL ago comes back with its keep-alive sent and not yet
// answered (renewing): the caller sends its Txn, then calls settle (see
// the top of this file).
func (b *Backend) acquire(ctx context.Context, asked int64, early bool) (etcdLease, error) {
	for {
		e, ok := b.pool.take(asked)
		if !ok {
			break
		}
		id := e.id
		set := time.Now()
		if early && !e.set.IsZero() && set.Sub(e.set) < time.Duration(e.granted)*time.Second/2 {
			if ka, err := b.keeper.send(id); err == nil {
				return etcdLease{id: id, ttl: e.granted, set: set, renewing: ka}, nil
			}
		}
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

// settle reads the answer to el's keep-alive if acquire left it pending,
// sending another on a stream of its own when the shared stream could not
// tell. It returns rpctypes.ErrLeaseNotFound if the lease had run out,
// another error if whether it was renewed is unknown; after nil, el.set
// and el.ttl are the renewal's.
func (b *Backend) settle(ctx context.Context, el *etcdLease) error {
	ka := el.renewing
	if ka == nil {
		return nil
	}
	el.renewing = nil
	ttl, err := b.keeper.wait(ctx, ka)
	if errors.Is(err, errNoStream) {
		el.set = time.Now()
		ttl, _, err = b.keepAliveOnce(ctx, el.id)
	}
	if err != nil {
		return fmt.Errorf("etcdbackend: lease keep-alive: %w", err)
	}
	if ttl != el.ttl {
		// Cannot happen: a pooled lease keeps the TTL it was granted.
		return fmt.Errorf("etcdbackend: lease keep-alive: TTL %ds, want %ds", ttl, el.ttl)
	}
	return nil
}

// recycle gives back an etcd lease that has no key attached (see the rules
// above), its TTL set after set (zero if unknown), or revokes it when the
// pool is full or closed.
func (b *Backend) recycle(ctx context.Context, id clientv3.LeaseID, asked, granted int64, set time.Time) {
	if !b.pool.put(id, asked, granted, set) {
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
	b.recycle(ctx, id, asked, granted, time.Time{})
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
