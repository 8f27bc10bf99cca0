package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	k := b.keys(req.Key)
	want := seconds(req.Timeout, req.Margin)
	// A concurrent renewal of the same lease may move the key to another
	// etcd lease under us; then look again, a few times.
	const attempts = 3
	for range attempts {
		st, err := b.read(ctx, k)
		if err != nil {
			return backend.Lease{}, err
		}
		if st.lease == nil || st.meta.leaseID != req.LeaseID {
			return backend.Lease{}, holderError(req.LeaseID, st)
		}
		var l backend.Lease
		if want == st.meta.asked {
			l, err = b.keepAlive(ctx, req, st)
		} else {
			l, err = b.relet(ctx, req, k, st, want)
		}
		if !errors.Is(err, errMoved) {
			return l, err
		}
	}
	return backend.Lease{}, fmt.Errorf("%w: etcd renew: lease moved by concurrent renewals", backend.ErrOutcomeUnknown)
}

// errMoved means the lease key left the etcd lease a renewal read.
var errMoved = errors.New("etcdbackend: lease key moved")

// keepAlive renews st's etcd lease as it is, and first its delay record's,
// if it has one, on the same stream (see records.go).
func (b *Backend) keepAlive(ctx context.Context, req backend.Request, st state) (backend.Lease, error) {
	ids := []clientv3.LeaseID{clientv3.LeaseID(st.lease.Lease)}
	if st.delay != nil {
		ids = []clientv3.LeaseID{clientv3.LeaseID(st.delay.Lease), ids[0]}
	}
	sent := time.Now()
	ttl, reachedServer, err := b.keepAliveOnce(ctx, ids...)
	if err == nil {
		m := st.meta
		m.granted, m.margin = ttl, req.Margin
		return lease(req.Key, m, st.lease.CreateRevision, sent), nil
	}
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return backend.Lease{}, mutationError("keep-alive", err, reachedServer)
	}
	// The etcd lease ran out: etcd answers only once its revoke (which
	// deleted the lease key) is applied. Unless a concurrent renewal moved
	// the key, or a release took it, the lease expired.
	return backend.Lease{}, b.afterLost(ctx, req, st)
}

// afterLost tells why the etcd lease st read is gone.
func (b *Backend) afterLost(ctx context.Context, req backend.Request, st state) error {
	now, err := b.read(ctx, b.keys(req.Key))
	if err != nil {
		return err
	}
	if now.lease != nil && now.meta.leaseID == req.LeaseID && now.lease.CreateRevision == st.lease.CreateRevision &&
		now.lease.Lease != st.lease.Lease {
		return errMoved
	}
	if now.lease != nil && now.meta.leaseID == req.LeaseID {
		return backend.ErrLeaseExpired
	}
	return holderError(req.LeaseID, now)
}

// relet moves st's lease key to a new etcd lease of want seconds, keeping its
// token, and its delay record, if it has one, to a new etcd lease of want
// seconds plus the delay's; then it revokes the old etcd leases. It never
// writes the ID record.
func (b *Backend) relet(ctx context.Context, req backend.Request, k keys, st state, want int64) (backend.Lease, error) {
	sent := time.Now()
	lg, err := b.cli.Grant(ctx, want)
	if err != nil {
		return backend.Lease{}, fmt.Errorf("etcdbackend: lease grant: %w", err)
	}
	old := clientv3.LeaseID(st.lease.Lease)
	m := meta{asked: want, granted: lg.TTL, margin: req.Margin, leaseID: req.LeaseID, owner: st.meta.owner}
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(k.lease), "=", st.lease.CreateRevision),
		clientv3.Compare(clientv3.LeaseValue(k.lease), "=", old),
	}
	ops := []clientv3.Op{clientv3.OpPut(k.lease, m.encode(), clientv3.WithLease(lg.ID))}
	fresh := []clientv3.LeaseID{lg.ID} // to revoke if the move does not happen
	var oldDelay clientv3.LeaseID
	if st.delay != nil {
		oldDelay = clientv3.LeaseID(st.delay.Lease)
		dv := delay{asked: lg.TTL + delaySeconds(st.delayed.d), d: st.delayed.d}
		dg, err := b.cli.Grant(ctx, dv.asked) // after lg: it ends later
		if err != nil {
			b.revoke(ctx, lg.ID)
			return backend.Lease{}, fmt.Errorf("etcdbackend: lease grant: %w", err)
		}
		dv.granted = dg.TTL
		fresh = append(fresh, dg.ID)
		cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(k.delay), "=", oldDelay))
		ops = append(ops, clientv3.OpPut(k.delay, dv.encode(), clientv3.WithLease(dg.ID)))
	}
	revokeFresh := func() {
		for _, id := range fresh {
			b.revoke(ctx, id)
		}
	}
	tctx, p := track(ctx)
	resp, err := b.kv.Txn(tctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		err = mutationError("renew txn", err, reached(p))
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			revokeFresh()
		}
		return backend.Lease{}, err
	}
	if !resp.Succeeded {
		revokeFresh()
		return backend.Lease{}, b.afterLost(ctx, req, st)
	}
	// The key now lives on the new etcd lease. That renewal is valid only if
	// the old etcd lease had not run out: etcd never renews an expired lease,
	// and leases never come back, so a successful keep-alive now proves the
	// old lease was live when the Txn moved the key.
	if _, _, err := b.keepAliveOnce(ctx, old); err != nil {
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The move happened; whether it counts is unknown.
			return backend.Lease{}, mutationError("keep-alive", err, true)
		}
		return backend.Lease{}, b.undoRelet(ctx, k, st, lg.ID, oldDelay, revokeFresh)
	}
	b.revoke(ctx, old)
	if oldDelay != 0 {
		b.revoke(ctx, oldDelay)
	}
	return lease(req.Key, m, st.lease.CreateRevision, sent), nil
}

// undoRelet undoes a relet whose old etcd lease ran out, perhaps before the
// Txn: it ends the lease as if it had expired, and reports that. A delay
// record goes back to its old etcd lease, which outlives the old lease key's
// by the delay, so that the delay runs from the expiry as if no move had
// happened; when that etcd lease has run out too, the delay is over, and the
// record goes.
func (b *Backend) undoRelet(ctx context.Context, k keys, st state, moved, oldDelay clientv3.LeaseID, revokeFresh func()) error {
	undo := func(ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
		return b.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(k.lease), "=", moved)).
			Then(append([]clientv3.Op{clientv3.OpDelete(k.lease)}, ops...)...).
			Commit()
	}
	var resp *clientv3.TxnResponse
	var err error
	if oldDelay == 0 {
		resp, err = undo()
	} else {
		resp, err = undo(clientv3.OpPut(k.delay, string(st.delay.Value), clientv3.WithLease(oldDelay)))
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			resp, err = undo(clientv3.OpDelete(k.delay))
		}
	}
	if err == nil && resp.Succeeded {
		// Otherwise the key left the new etcd lease by another's hand: a
		// release (which may have pooled it, see pool.go), a forced
		// release or another renewal (which revoked it), so it is not ours
		// to revoke.
		revokeFresh()
	}
	if err != nil {
		// The move happened and stands: whatever the undo's error, the
		// renewal's outcome is unknown.
		return mutationError("renew undo txn", err, true)
	}
	return backend.ErrLeaseExpired
}
