package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

// Grant implements backend.Backend.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	// A Txn that names an etcd lease which ran out before the Txn arrived
	// fails as a whole, so trying again with a fresh etcd lease is safe; so
	// is trying again after a Txn that wrote nothing (errGrantAgain).
	const attempts = 3
	for attempt := 1; ; attempt++ {
		l, err := b.grant(ctx, req)
		if errors.Is(err, errPooledGone) && ctx.Err() == nil {
			attempt-- // not an attempt: a pooled etcd lease was gone (at most poolSize times)
			continue
		}
		retry := errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, errGrantAgain)
		if attempt < attempts && retry && ctx.Err() == nil {
			continue
		}
		return l, err
	}
}

// grant makes one attempt at Grant: an etcd lease (a keep-alive of a pooled
// one, or LeaseGrant), a second one for the delay record when the request
// has a lock delay, then one Txn. Without a lock delay, a pooled lease's
// keep-alive may go out with the Txn (see pool.go).
func (b *Backend) grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	k := b.keys(req.Key)
	asked := seconds(req.Timeout, req.Margin)
	el, err := b.acquire(ctx, asked, req.LockDelay == 0)
	if err != nil {
		return backend.Lease{}, err
	}
	m := meta{asked: asked, granted: el.ttl, margin: req.Margin, leaseID: req.LeaseID, owner: req.Owner}
	put := []clientv3.Op{
		// The only write of the ID record: its ModRevision is the token of
		// the most recent lease (see Inspect).
		clientv3.OpPut(k.lease, m.encode(), clientv3.WithLease(el.id)),
		clientv3.OpPut(k.id, req.LeaseID),
	}
	var dl etcdLease // the delay record's etcd lease; zero without a delay
	var dv delay
	if req.LockDelay > 0 {
		// Acquired after el, so that its timer starts later: it ends at
		// least ceil(delay) after el's (see records.go).
		dv = delay{asked: el.ttl + delaySeconds(req.LockDelay), d: req.LockDelay}
		if dl, err = b.acquire(ctx, dv.asked, false); err != nil {
			b.recycle(ctx, el.id, asked, el.ttl, el.set)
			return backend.Lease{}, err
		}
		dv.granted = dl.ttl
		put = append(put, clientv3.OpPut(k.delay, dv.encode(), clientv3.WithLease(dl.id)))
	}
	// The key must be free, out of any lock delay, and this must not be a
	// resent grant whose lease has ended (the ID record names it). etcd
	// fails a comparison of the value of a key that does not exist, so "the
	// ID record is not req.LeaseID" is one comparison only for a key whose
	// ID record exists: one this backend has seen granted (flat, see
	// known.go). Otherwise the check is a nested Txn, which also passes when
	// there is no ID record.
	free := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(k.lease), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(k.delay), "=", 0),
	}
	flat := b.known.has(req.Key)
	tctx, p := track(ctx)
	txn := b.kv.Txn(tctx)
	if flat {
		txn = txn.If(append(free, clientv3.Compare(clientv3.Value(k.id), "!=", req.LeaseID))...).Then(put...)
	} else {
		txn = txn.If(free...).
			Then(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(k.id), "=", req.LeaseID)}, nil, put))
	}
	resp, err := txn.Commit()
	// Always read the keep-alive's answer, if one is pending: it tells
	// whether the lease the Txn named lives on.
	pipelined := el.renewing != nil
	renewErr := b.settle(ctx, &el)
	if err != nil {
		if pipelined && errors.Is(err, rpctypes.ErrLeaseNotFound) && errors.Is(renewErr, rpctypes.ErrLeaseNotFound) {
			return backend.Lease{}, errPooledGone // the Txn wrote nothing
		}
		err = mutationError("grant txn", err, reached(p))
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			b.revoke(ctx, el.id)
			if dl.id != 0 {
				b.revoke(ctx, dl.id)
			}
		}
		// After a lost answer the etcd leases may hold the key: they are
		// neither revoked nor reused.
		return backend.Lease{}, err
	}
	if resp.Succeeded && (flat || !resp.Responses[0].GetResponseTxn().Succeeded) {
		b.known.add(req.Key)
		if renewErr != nil {
			// The key is attached to an etcd lease that had run out (etcd
			// ends it, and the key with it) or whose renewal is unknown: a
			// resend answers which. A lease found gone is named in words
			// (%v): Grant tries rpctypes.ErrLeaseNotFound again with another
			// lease, which is right only for a Txn that attached nothing.
			if errors.Is(renewErr, rpctypes.ErrLeaseNotFound) {
				return backend.Lease{}, fmt.Errorf("%w: etcdbackend: grant: the key was attached to an etcd lease found gone (%v)", backend.ErrOutcomeUnknown, renewErr)
			}
			return backend.Lease{}, fmt.Errorf("%w: etcdbackend: grant: %w", backend.ErrOutcomeUnknown, renewErr)
		}
		b.pool.granted(el.id, el.set)
		if dl.id != 0 {
			b.pool.granted(dl.id, dl.set)
		}
		return lease(req.Key, m, resp.Header.Revision, el.set), nil
	}
	// From here on, the Txn attached nothing to the etcd leases.
	switch {
	case renewErr == nil:
		b.recycle(ctx, el.id, asked, el.ttl, el.set)
	case !errors.Is(renewErr, rpctypes.ErrLeaseNotFound):
		b.recycle(ctx, el.id, asked, el.ttl, time.Time{}) // renewed or not: the next grant renews it first
	}
	if dl.id != 0 {
		b.recycle(ctx, dl.id, dv.asked, dl.ttl, dl.set)
	}
	return b.refusedGrant(ctx, k, req, resp, flat)
}

// errPooledGone means a grant's Txn named a pooled etcd lease that was
// gone, as the keep-alive sent with it found: nothing happened, and the
// grant takes another.
var errPooledGone = errors.New("etcdbackend: grant: pooled etcd lease gone")

// The grant Txn carries no reads: every grant would pay for them (each op
// of a Txn is encoded, decoded and copied several times on its way through
// etcd), and only a refused grant needs them. A refused grant reads the
// key's records afterwards, as they were at the revision its Txn ran at
// (the Txn wrote nothing, so that is the revision its response names): the
// answer is the one reads inside the Txn would have given.

// errGrantAgain means a grant Txn that wrote nothing should be tried again:
// its records could not be read as it saw them (compacted away since), or
// it compared an ID record that did not exist (see grant).
var errGrantAgain = errors.New("etcdbackend: grant: refused txn could not be answered")

// refusedGrant answers a grant whose Txn wrote nothing, from the key's
// records at the Txn's revision: the key held by another lease (a
// *HeldError) or by this one (a resent grant: the lease unchanged), or this
// lease ended, released (ErrLeaseNotFound) or expired (ErrLeaseExpired).
func (b *Backend) refusedGrant(ctx context.Context, k keys, req backend.Request, resp *clientv3.TxnResponse, flat bool) (backend.Lease, error) {
	st, err := b.readAt(ctx, k, resp.Header.Revision)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return backend.Lease{}, errGrantAgain
	}
	if err != nil {
		return backend.Lease{}, err
	}
	if st.id == nil {
		b.known.remove(req.Key) // deleted by hand
	} else {
		b.known.add(req.Key)
	}
	switch {
	case st.lease != nil && st.meta.leaseID != req.LeaseID:
		// With a lock delay, the delay record's etcd lease ends the delay
		// after the lease: its time left is the lease's plus the delay.
		until := st.lease
		if st.delay != nil {
			until = st.delay
		}
		remaining, _, _ := b.timeToLive(ctx, clientv3.LeaseID(until.Lease))
		return backend.Lease{}, &backend.HeldError{Remaining: remaining}
	case st.lease != nil:
		return b.resentGrant(ctx, req.Key, st.meta, st.lease)
	case st.recentID() == req.LeaseID && st.released == req.LeaseID:
		return backend.Lease{}, backend.ErrLeaseNotFound // granted, then released
	case st.recentID() == req.LeaseID:
		return backend.Lease{}, backend.ErrLeaseExpired // granted, then expired
	case st.delay != nil:
		left, _ := b.delayLeft(ctx, st.delay)
		return backend.Lease{}, &backend.HeldError{Delayed: true, Remaining: left}
	case flat && st.id == nil:
		return backend.Lease{}, errGrantAgain // now as a nested Txn
	}
	return backend.Lease{}, errors.New("etcdbackend: grant txn refused, but the records at its revision allow it")
}

// timeToLive returns how long etcd lease id has left, in whole seconds as
// etcd reports it (rounded down), and the local time just before asking. A
// lease that ran out or is gone gets rpctypes.ErrLeaseNotFound.
func (b *Backend) timeToLive(ctx context.Context, id clientv3.LeaseID) (left time.Duration, at time.Time, err error) {
	at = time.Now()
	ttl, err := b.cli.TimeToLive(ctx, id)
	if err != nil {
		return 0, at, err
	}
	if ttl.TTL < 0 {
		return 0, at, rpctypes.ErrLeaseNotFound
	}
	return time.Duration(ttl.TTL) * time.Second, at, nil
}

// delayLeft returns how long the lock delay of delay record kv has left, and
// the local time just before asking: its etcd lease's time left as etcd
// reports it (whole seconds, rounded down) plus one second, an upper bound
// (but for the leader's up to 500ms to notice the end), so that a waiter
// sleeping that long finds the delay over. It is zero when the etcd lease
// has run out or cannot be read.
func (b *Backend) delayLeft(ctx context.Context, kv *mvccpb.KeyValue) (time.Duration, time.Time) {
	left, at, err := b.timeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return 0, at
	}
	return left + time.Second, at
}

// resentGrant answers a grant resent while its lease key exists: the lease
// unchanged, with ExpiresAt estimated from the etcd lease's remaining TTL.
// Should the etcd lease be gone by then, the records tell why, as for a
// renewal (afterLost): a renewal moved the key to another etcd lease (ask
// again), a release or a forced release took it (ErrLeaseNotFound, which a
// forced release that revoked the etcd lease after the Txn must give, not
// ErrLeaseExpired), or it ran out.
func (b *Backend) resentGrant(ctx context.Context, key string, m meta, kv *mvccpb.KeyValue) (backend.Lease, error) {
	for range 3 {
		left, now, err := b.timeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err == nil {
			l := lease(key, m, kv.CreateRevision, now)
			l.ExpiresAt = now.Add(left)
			return l, nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The lease is ours, but its expiry is unknown: resending learns it.
			return backend.Lease{}, fmt.Errorf("%w: etcd lease time-to-live: %w", backend.ErrOutcomeUnknown, err)
		}
		st, err := b.read(ctx, b.keys(key))
		switch {
		case err != nil:
			return backend.Lease{}, err
		case st.lease != nil && st.meta.leaseID == m.leaseID && st.lease.CreateRevision == kv.CreateRevision && st.lease.Lease != kv.Lease:
			m, kv = st.meta, st.lease
			continue
		case st.released == m.leaseID:
			return backend.Lease{}, backend.ErrLeaseNotFound // released, or forced out
		case st.recentID() == m.leaseID:
			return backend.Lease{}, backend.ErrLeaseExpired // granted, and ran out
		}
		// Another lease began since, and the records no longer tell how
		// this one ended; the resend changed nothing.
		return backend.Lease{}, fmt.Errorf("%w: the lease ended, and another began, while its grant was resent", backend.ErrOutcomeUnknown)
	}
	return backend.Lease{}, fmt.Errorf("%w: etcd resent grant: lease moved by concurrent renewals", backend.ErrOutcomeUnknown)
}

// lease returns the record of a lease granted or renewed to m's terms; sent
// is the local time just before the request that set the etcd lease's TTL
// (LeaseGrant or a keep-alive) was sent.
func lease(key string, m meta, token int64, sent time.Time) backend.Lease {
	granted := time.Duration(m.granted) * time.Second
	return backend.Lease{
		Key:       key,
		LeaseID:   m.leaseID,
		Token:     uint64(token),
		TTL:       granted - m.margin,
		Margin:    m.margin,
		ExpiresAt: sent.Add(granted),
	}
}
