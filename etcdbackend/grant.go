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
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	// A Txn that names an etcd lease which ran out before the Txn arrived
	// fails as a whole, so trying again with a fresh etcd lease is safe; so
	// is trying again after a Txn that wrote nothing (errGrantRace).
	const attempts = 3
	for attempt := 1; ; attempt++ {
		l, err := b.grant(ctx, req)
		retry := errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, errGrantRace)
		if attempt < attempts && retry && ctx.Err() == nil {
			continue
		}
		return l, err
	}
}

// grant makes one attempt at Grant: an etcd lease (a keep-alive of a pooled
// one, or LeaseGrant), then one Txn.
func (b *Backend) grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	k := b.keys(req.Key)
	asked := seconds(req.Timeout, req.Margin)
	el, err := b.acquire(ctx, asked)
	if err != nil {
		return backend.Lease{}, err
	}
	m := meta{asked: asked, granted: el.ttl, margin: req.Margin, leaseID: req.LeaseID}
	tctx, p := track(ctx)
	resp, err := b.kv.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.lease), "=", 0)).
		Then(clientv3.OpTxn(
			// The key is free. Is this a resent grant whose lease has ended?
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k.id), "=", req.LeaseID)},
			nil,
			[]clientv3.Op{
				// The only write of the ID record: its ModRevision is the
				// token of the most recent lease (see Inspect).
				clientv3.OpPut(k.lease, m.encode(), clientv3.WithLease(el.id)),
				clientv3.OpPut(k.id, req.LeaseID),
			})).
		Commit()
	if err != nil {
		err = mutationError("grant txn", err, reached(p))
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			b.revoke(ctx, el.id)
		}
		// After a lost answer the etcd lease may hold the key: it is
		// neither revoked nor reused.
		return backend.Lease{}, err
	}
	if resp.Succeeded {
		inner := resp.Responses[0].GetResponseTxn()
		if !inner.Succeeded {
			return lease(req.Key, m, resp.Header.Revision, el.set), nil
		}
		// From here on, the Txn attached nothing to the etcd lease.
		b.recycle(ctx, el.id, asked, el.ttl)
		return backend.Lease{}, b.endedGrant(ctx, k, req.LeaseID, resp)
	}
	b.recycle(ctx, el.id, asked, el.ttl)
	return b.heldGrant(ctx, k, req, resp)
}

// The grant Txn carries no reads: every grant would pay for them (each op
// of a Txn is encoded, decoded and copied several times on its way through
// etcd), and only a refused grant needs them. A refused grant reads the
// key's records afterwards, as they were at the revision its Txn ran at
// (the Txn wrote nothing, so that is the revision its response names): the
// answer is the one reads inside the Txn would have given.

// errGrantRace means a refused grant could not read the records as its Txn
// saw them (compacted away since): the grant, which changed nothing, is
// tried again.
var errGrantRace = errors.New("etcdbackend: grant: the key's records were compacted before they could be read")

// refusedState reads the key's records at the revision of a grant Txn
// that wrote nothing.
func (b *Backend) refusedState(ctx context.Context, k keys, resp *clientv3.TxnResponse) (state, error) {
	st, err := b.readAt(ctx, k, resp.Header.Revision)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return state{}, errGrantRace
	}
	return st, err
}

// heldGrant answers a grant whose Txn found the key's lease key: the key is
// held by another lease (a *HeldError), or by this one (a resent grant: the
// lease unchanged).
func (b *Backend) heldGrant(ctx context.Context, k keys, req backend.Request, resp *clientv3.TxnResponse) (backend.Lease, error) {
	st, err := b.refusedState(ctx, k, resp)
	switch {
	case err != nil:
		return backend.Lease{}, err
	case st.lease == nil:
		return backend.Lease{}, errors.New("etcdbackend: grant txn: lease key missing at the txn's revision")
	case st.meta.leaseID != req.LeaseID:
		remaining, _, _ := b.timeToLive(ctx, clientv3.LeaseID(st.lease.Lease))
		return backend.Lease{}, &backend.HeldError{Remaining: remaining}
	}
	return b.resentGrant(ctx, req.Key, st.meta, st.lease)
}

// endedGrant answers a grant whose Txn found the key free and leaseID its
// most recent lease: a resent grant of a lease that has ended, released
// (ErrLeaseNotFound) or expired (ErrLeaseExpired).
func (b *Backend) endedGrant(ctx context.Context, k keys, leaseID string, resp *clientv3.TxnResponse) error {
	st, err := b.refusedState(ctx, k, resp)
	if err != nil {
		return err
	}
	if st.released == leaseID {
		return backend.ErrLeaseNotFound // granted, then released
	}
	return backend.ErrLeaseExpired // granted, then expired
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

// resentGrant answers a grant resent while its lease key exists: the lease
// unchanged, with ExpiresAt estimated from the etcd lease's remaining TTL.
func (b *Backend) resentGrant(ctx context.Context, key string, m meta, kv *mvccpb.KeyValue) (backend.Lease, error) {
	left, now, err := b.timeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return backend.Lease{}, backend.ErrLeaseExpired // granted, and ran out
	}
	if err != nil {
		// The lease is ours, but its expiry is unknown: resending learns it.
		return backend.Lease{}, fmt.Errorf("%w: etcd lease time-to-live: %w", backend.ErrOutcomeUnknown, err)
	}
	l := lease(key, m, kv.CreateRevision, now)
	l.ExpiresAt = now.Add(left)
	return l, nil
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
