package etcdbackend

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx, backend.CheckRelease(key, leaseID)); err != nil {
		return err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	k := b.keys(key)
	const attempts = 3
	for range attempts {
		// The most recent lease is leaseID's and its lease key exists, so
		// the key is leaseID's: delete it, and its delay record, if it has
		// one (a release by the holder leaves no delay). A stale or resent
		// release of an older lease fails the first comparison and cannot
		// touch a newer holder's key.
		tctx, p := track(ctx)
		resp, err := b.kv.Txn(tctx).
			If(
				clientv3.Compare(clientv3.Value(k.id), "=", leaseID),
				clientv3.Compare(clientv3.CreateRevision(k.lease), "!=", 0),
			).
			Then(
				clientv3.OpDelete(k.lease, clientv3.WithPrevKV()),
				clientv3.OpPut(k.released, leaseID),
				clientv3.OpDelete(k.delay, clientv3.WithPrevKV()),
			).
			Commit()
		if err != nil {
			return mutationError("release txn", err, reached(p))
		}
		if resp.Succeeded {
			// Each delete detached the only key of its etcd lease: keep
			// those leases for later grants (see pool.go).
			b.recycleDeleted(ctx, resp.Responses[0])
			b.recycleDeleted(ctx, resp.Responses[2])
			return nil
		}
		// The Txn wrote nothing. Its answer is in the records as it saw
		// them, at the revision its response names (see grant.go: the Txn
		// carries no reads, which only a refused release needs).
		st, err := b.readAt(ctx, k, resp.Header.Revision)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue // compacted away since: try again
		}
		if err != nil {
			return err
		}
		if st.recentID() == leaseID && st.released == leaseID {
			return nil // released already: a resent release is harmless
		}
		return holderError(leaseID, st)
	}
	return errReleaseCompacted
}

// errReleaseCompacted means a refused Release could not read the records
// as its Txn saw them, each time: nothing changed.
var errReleaseCompacted = errors.New("etcdbackend: release: the key's records were compacted before they could be read")

// revokeDeleted revokes the etcd lease of the record that a Txn's
// delete-with-previous-value op removed.
func (b *Backend) revokeDeleted(ctx context.Context, op *pb.ResponseOp) {
	if prev := op.GetResponseDeleteRange().GetPrevKvs(); len(prev) == 1 && prev[0].Lease != 0 {
		b.revoke(ctx, clientv3.LeaseID(prev[0].Lease))
	}
}

// revokeReplaced revokes the etcd lease of the record that a Txn's
// put-with-previous-value op moved to another etcd lease.
func (b *Backend) revokeReplaced(ctx context.Context, op *pb.ResponseOp) {
	if prev := op.GetResponsePut().GetPrevKv(); prev != nil && prev.Lease != 0 {
		b.revoke(ctx, clientv3.LeaseID(prev.Lease))
	}
}

// errBusy means ForceRelease kept finding a different lease than it read.
var errBusy = errors.New("etcdbackend: force release: the key's lease kept changing")

// ForceRelease implements backend.ForceReleaser with a read and one Txn: it
// deletes the lease key, guarded on the CreateRevision it read (so it can
// never end a newer lease than the one it read), and records that lease's
// ID as released, so its holder's Renew gets ErrLeaseNotFound and a resent
// Release returns nil, as after the holder's own release. It then revokes
// the lease's etcd lease: it never reuses it, as the lease's holder may still
// be renewing it.
//
// A lease with a lock delay has a delay record: the same Txn puts it on a
// fresh etcd lease of the delay alone (rounded up to whole seconds, and at
// least etcd's minimum TTL), obtained before the Txn and renewed once after
// it, so that the delay runs from the Txn, or a little later; the record's
// old etcd lease is revoked with the lease key's.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return false, err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	k := b.keys(key)
	const attempts = 3
	for range attempts {
		st, err := b.read(ctx, k)
		if err != nil {
			return false, err
		}
		if st.lease == nil {
			return false, nil
		}
		ops := []clientv3.Op{clientv3.OpDelete(k.lease, clientv3.WithPrevKV()), clientv3.OpPut(k.released, st.meta.leaseID)}
		var fl etcdLease // the delay's etcd lease; zero without a delay
		var dv delay
		if st.delay != nil {
			dv = delay{asked: delaySeconds(st.delayed.d), d: st.delayed.d}
			if fl, err = b.acquire(ctx, dv.asked, false); err != nil {
				return false, err
			}
			dv.granted = fl.ttl
			ops = append(ops, clientv3.OpPut(k.delay, dv.encode(), clientv3.WithLease(fl.id), clientv3.WithPrevKV()))
		}
		tctx, p := track(ctx)
		resp, err := b.kv.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(k.lease), "=", st.lease.CreateRevision)).
			Then(ops...).
			Commit()
		if err != nil {
			err = mutationError("force release txn", err, reached(p))
			if fl.id != 0 && !errors.Is(err, backend.ErrOutcomeUnknown) {
				b.recycle(ctx, fl.id, dv.asked, fl.ttl, fl.set)
			}
			return false, err
		}
		if !resp.Succeeded {
			// That lease ended (and perhaps another began) after the read.
			if fl.id != 0 {
				b.recycle(ctx, fl.id, dv.asked, fl.ttl, fl.set)
			}
			continue
		}
		b.revokeDeleted(ctx, resp.Responses[0])
		if fl.id != 0 {
			// The delay runs from the Txn: restart its timer now. Should
			// this fail, the delay runs from the acquire, one round trip
			// earlier.
			_, _, _ = b.keepAliveOnce(ctx, fl.id)
			b.revokeReplaced(ctx, resp.Responses[2])
		}
		return true, nil
	}
	return false, errBusy
}
