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
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	k := b.keys(key)
	const attempts = 3
	for range attempts {
		// The most recent lease is leaseID's and its lease key exists, so
		// the key is leaseID's: delete it. A stale or resent release of an
		// older lease fails the first comparison and cannot touch a newer
		// holder's key.
		tctx, p := track(ctx)
		resp, err := b.kv.Txn(tctx).
			If(
				clientv3.Compare(clientv3.Value(k.id), "=", leaseID),
				clientv3.Compare(clientv3.CreateRevision(k.lease), "!=", 0),
			).
			Then(clientv3.OpDelete(k.lease, clientv3.WithPrevKV()), clientv3.OpPut(k.released, leaseID)).
			Commit()
		if err != nil {
			return mutationError("release txn", err, reached(p))
		}
		if resp.Succeeded {
			// The delete detached the only key of its etcd lease: keep
			// that lease for a later grant (see pool.go).
			b.recycleDeleted(ctx, resp.Responses[0])
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

// revokeDeleted revokes the etcd lease of the lease key that a Txn's
// delete-with-previous-value op removed.
func (b *Backend) revokeDeleted(ctx context.Context, op *pb.ResponseOp) {
	if prev := op.GetResponseDeleteRange().GetPrevKvs(); len(prev) == 1 && prev[0].Lease != 0 {
		b.revoke(ctx, clientv3.LeaseID(prev[0].Lease))
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
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx); err != nil {
		return false, err
	}
	if err := backend.CheckKey(key); err != nil {
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
		tctx, p := track(ctx)
		resp, err := b.kv.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(k.lease), "=", st.lease.CreateRevision)).
			Then(clientv3.OpDelete(k.lease, clientv3.WithPrevKV()), clientv3.OpPut(k.released, st.meta.leaseID)).
			Commit()
		if err != nil {
			return false, mutationError("force release txn", err, reached(p))
		}
		if resp.Succeeded {
			b.revokeDeleted(ctx, resp.Responses[0])
			return true, nil
		}
		// That lease ended (and perhaps another began) after the read.
	}
	return false, errBusy
}
