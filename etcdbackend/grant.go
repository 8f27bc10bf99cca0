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
	// fails as a whole, so trying again with a fresh etcd lease is safe.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		l, err := b.grant(ctx, req)
		if attempt < attempts && errors.Is(err, rpctypes.ErrLeaseNotFound) && ctx.Err() == nil {
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
			[]clientv3.Op{clientv3.OpGet(k.released)},
			[]clientv3.Op{
				// The only write of the ID record: its ModRevision is the
				// token of the most recent lease (see Inspect).
				clientv3.OpPut(k.lease, m.encode(), clientv3.WithLease(el.id)),
				clientv3.OpPut(k.id, req.LeaseID),
			})).
		Else(clientv3.OpGet(k.lease)).
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
		if rel := inner.Responses[0].GetResponseRange().Kvs; len(rel) == 1 && string(rel[0].Value) == req.LeaseID {
			return backend.Lease{}, backend.ErrLeaseNotFound // granted, then released
		}
		return backend.Lease{}, backend.ErrLeaseExpired // granted, then expired
	}
	b.recycle(ctx, el.id, asked, el.ttl)
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return backend.Lease{}, errors.New("etcdbackend: grant txn: lease key missing from response")
	}
	held, err := decodeMeta(kvs[0].Value)
	if err != nil {
		return backend.Lease{}, err
	}
	if held.leaseID != req.LeaseID {
		remaining, _, _ := b.timeToLive(ctx, clientv3.LeaseID(kvs[0].Lease))
		return backend.Lease{}, &backend.HeldError{Remaining: remaining}
	}
	return b.resentGrant(ctx, req.Key, held, kvs[0])
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
