package etcdbackend

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

var _ backend.MultiGranter = (*Backend)(nil)

// GrantMany implements backend.MultiGranter with one read of every key's
// records (one Txn of range reads, at one revision) and one write Txn that
// compares what the read saw of each key and puts every lease: both hold
// or neither does. A write Txn whose comparisons fail (another request
// wrote a key between the two) wrote nothing, and GrantMany reads again.
// Each lease has an etcd lease of its own, so that each is renewed and
// released as any lease is; their tokens are the write Txn's revision.
func (b *Backend) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckMany(reqs)); err != nil {
		return nil, err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	const attempts = 10
	for attempt := 1; ; attempt++ {
		leases, err := b.grantMany(ctx, reqs)
		retry := errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, errGrantAgain)
		if attempt < attempts && retry && ctx.Err() == nil {
			continue
		}
		return leases, err
	}
}

// grantMany makes one attempt at GrantMany.
func (b *Backend) grantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	ks := make([]keys, len(reqs))
	reads := make([]clientv3.Op, len(reqs))
	for i, r := range reqs {
		ks[i] = b.keys(r.Key)
		reads[i] = clientv3.OpGet(ks[i].delay, clientv3.WithRange(ks[i].released+"\x00"))
	}
	resp, err := b.kv.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, readError(err)
	}
	sts := make([]state, len(reqs))
	for i := range reqs {
		if sts[i], err = decodeState(ks[i], resp.Responses[i].GetResponseRange().Kvs); err != nil {
			return nil, err
		}
	}
	// Decide, key by key in key order, as Grant would: the first refusal
	// is the answer.
	resent := make([]bool, len(reqs))
	all := true
	for _, i := range backend.KeyOrder(reqs) {
		st, r := sts[i], reqs[i]
		switch {
		case st.lease != nil && st.meta.leaseID != r.LeaseID:
			until := st.lease
			if st.delay != nil {
				until = st.delay
			}
			remaining, _, _ := b.timeToLive(ctx, clientv3.LeaseID(until.Lease))
			return nil, &backend.ManyError{Index: i, Err: &backend.HeldError{Remaining: remaining}}
		case st.lease != nil:
			resent[i] = true
			continue
		case st.recentID() == r.LeaseID && st.released == r.LeaseID:
			return nil, &backend.ManyError{Index: i, Err: backend.ErrLeaseNotFound}
		case st.recentID() == r.LeaseID:
			return nil, &backend.ManyError{Index: i, Err: backend.ErrLeaseExpired}
		case st.delay != nil:
			left, _ := b.delayLeft(ctx, st.delay)
			return nil, &backend.ManyError{Index: i, Err: &backend.HeldError{Delayed: true, Remaining: left}}
		}
		all = false
	}
	leases := make([]backend.Lease, len(reqs))
	if all { // a resend of a GrantMany that took every key
		for i, r := range reqs {
			if leases[i], err = b.resentGrant(ctx, r.Key, sts[i].meta, sts[i].lease); err != nil {
				return nil, err
			}
		}
		return leases, nil
	}
	// Every comparison names what the read saw: the ID record's revision
	// (0: none), and no lease or delay record, or this request's lease
	// record as it was.
	var (
		cmps     []clientv3.Cmp
		puts     []clientv3.Op
		acquired []etcdLease // to give back when the Txn writes nothing
		asked    []int64
		metas    = make([]meta, len(reqs))
		sets     = make([]etcdLease, len(reqs))
	)
	giveBack := func() {
		for j, el := range acquired {
			b.recycle(ctx, el.id, asked[j], el.ttl, el.set)
		}
	}
	for i, r := range reqs {
		k, st := ks[i], sts[i]
		if resent[i] {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k.lease), "=", st.lease.CreateRevision))
			continue
		}
		var idRev int64
		if st.id != nil {
			idRev = st.id.ModRevision
		}
		cmps = append(cmps,
			clientv3.Compare(clientv3.ModRevision(k.id), "=", idRev),
			clientv3.Compare(clientv3.CreateRevision(k.lease), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(k.delay), "=", 0))
		secs := seconds(r.Timeout, r.Margin)
		el, err := b.acquire(ctx, secs, false) // no keep-alive sent with the Txn (see grant)
		if err != nil {
			giveBack()
			return nil, err
		}
		acquired, asked = append(acquired, el), append(asked, secs)
		metas[i], sets[i] = meta{asked: secs, granted: el.ttl, margin: r.Margin, leaseID: r.LeaseID, owner: r.Owner}, el
		puts = append(puts, clientv3.OpPut(k.lease, metas[i].encode(), clientv3.WithLease(el.id)), clientv3.OpPut(k.id, r.LeaseID))
		if r.LockDelay > 0 {
			dv := delay{asked: el.ttl + delaySeconds(r.LockDelay), d: r.LockDelay}
			dl, err := b.acquire(ctx, dv.asked, false)
			if err != nil {
				giveBack()
				return nil, err
			}
			acquired, asked = append(acquired, dl), append(asked, dv.asked)
			dv.granted = dl.ttl
			puts = append(puts, clientv3.OpPut(k.delay, dv.encode(), clientv3.WithLease(dl.id)))
		}
	}
	tctx, p := track(ctx)
	wresp, err := b.kv.Txn(tctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		err = mutationError("grant txn", err, reached(p))
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			for _, el := range acquired {
				b.revoke(ctx, el.id)
			}
		}
		return nil, err // after a lost answer the etcd leases may hold the keys
	}
	if !wresp.Succeeded {
		giveBack()
		return nil, errGrantAgain // a key changed since the read
	}
	for _, el := range acquired {
		b.pool.granted(el.id, el.set)
	}
	for i, r := range reqs {
		b.known.add(r.Key)
		if resent[i] {
			if leases[i], err = b.resentGrant(ctx, r.Key, sts[i].meta, sts[i].lease); err != nil {
				return nil, err
			}
			continue
		}
		leases[i] = lease(r.Key, metas[i], wresp.Header.Revision, sets[i].set)
	}
	return leases, nil
}
