package etcdbackend

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

// Inspect implements backend.Inspector. It is one linearizable read of the
// key's records when no lease is live, and that read plus a LeaseTimeToLive
// of the live lease's etcd lease (two round trips) when one is: etcd reports
// a lease's time left only there, and the etcd lease's ID comes from the
// read. Remaining is in whole seconds, rounded down by etcd; ExpiresAt is the
// local time before the second request plus Remaining. A lease in the window
// after its TTL ran out and before etcd revoked it is live, as for Token,
// with zero Remaining.
//
// During a lock delay (no lease key, the delay record alive), it is that
// read plus a LeaseTimeToLive of the delay record's etcd lease: DelayRemaining
// is an upper bound, that etcd lease's time left in whole seconds plus one
// (see delayLeft), and DelayedUntil the local time before asking plus
// DelayRemaining.
//
// MaxToken is the ModRevision of the key's ID record: the record is written
// only by the grant Txn that creates a lease key, so its ModRevision is the
// token of the most recent lease, live or ended.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return backend.KeyState{}, err
	}
	k := b.keys(key)
	resp, err := b.kv.Txn(ctx).Then(clientv3.OpGet(k.lease), clientv3.OpGet(k.id), clientv3.OpGet(k.delay)).Commit()
	if err != nil {
		return backend.KeyState{}, fmt.Errorf("etcdbackend: read: %w", err)
	}
	var r records
	for i, kv := range []**mvccpb.KeyValue{&r.lease, &r.id, &r.delay} {
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 {
			*kv = kvs[0]
		}
	}
	st := r.state()
	b.fillTime(ctx, &st, r.timed())
	return st, nil
}

// state returns the state that a key's records show, without the times
// left.
func (r records) state() backend.KeyState {
	var st backend.KeyState
	if r.id != nil {
		st.MaxToken = uint64(r.id.ModRevision)
	}
	var d delay
	if r.delay != nil {
		d, _ = decodeDelay(r.delay.Value)
	}
	if r.lease != nil {
		st.Live = true
		st.Token = uint64(r.lease.CreateRevision)
		st.MaxToken = max(st.MaxToken, st.Token)
		if m, err := decodeMeta(r.lease.Value); err == nil {
			st.Owner = m.owner
		}
		st.LockDelay = d.d
	}
	return st
}

// timed returns the etcd lease whose time left fills the key's state: the
// live lease's, or during a lock delay the delay record's; 0 for none.
func (r records) timed() int64 {
	switch {
	case r.lease != nil:
		return r.lease.Lease
	case r.delay != nil:
		return r.delay.Lease
	}
	return 0
}

// fillTime sets st's Remaining and ExpiresAt from etcd lease id's time left
// when st is live, or its DelayRemaining and DelayedUntil when not (id is
// then the delay record's etcd lease, see records.timed); nothing when id
// is 0. A lease that ran out (or is gone) keeps zero Remaining and
// ExpiresAt is the time of asking; a delay whose etcd lease ran out leaves
// both delay fields zero: it is ending.
func (b *Backend) fillTime(ctx context.Context, st *backend.KeyState, id int64) {
	switch {
	case id == 0:
	case st.Live:
		left, at, _ := b.timeToLive(ctx, clientv3.LeaseID(id))
		st.Remaining = left
		st.ExpiresAt = at.Add(left)
	default:
		left, at := b.delayLeft(ctx, &mvccpb.KeyValue{Lease: id})
		if left > 0 {
			st.DelayRemaining = left
			st.DelayedUntil = at.Add(left)
		}
	}
}

// DefaultListLimit is the page size of List when the caller gives none.
const DefaultListLimit = 100

// List implements backend.Lister. User keys are stored base64url-encoded,
// so a user prefix maps to the encoded prefix its whole bytes fix (see
// encodedPrefix), and the keys in that etcd range are decoded and filtered.
// Keys are listed in the order of their encodings; the cursor is the
// encoding of the next key. Each page is one linearizable range read, plus
// one round of LeaseTimeToLive requests, run at once, for the page's live
// leases and lock delays (their times as for Inspect). A key is listed
// while it has an ID record: a reclaimed key (see Retention in the package
// doc) is not.
func (b *Backend) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	if err := b.ready(ctx, nil); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	if strings.ContainsRune(cursor, '/') {
		return nil, "", fmt.Errorf("etcdbackend: %w", backend.ErrInvalidCursor)
	}
	from := b.prefix + encodedPrefix(prefix)
	end := clientv3.GetPrefixRangeEnd(from)
	start := from
	if cursor != "" {
		// After "<prefix><cursor>" come the keys whose encodings extend the
		// cursor's with '-', which sorts before '/' and so was listed
		// already: start at the cursor's own records.
		start = max(from, b.prefix+cursor+"/")
	}
	var page []backend.KeyInfo
	var timed []int64           // etcd leases whose time left fills page's states, by index in page
	fetch := 5*int64(limit) + 5 // records: a key has two to five (and its line's entries)
	for {
		resp, err := b.kv.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(fetch))
		if err != nil {
			return nil, "", fmt.Errorf("etcdbackend: range: %w", err)
		}
		groups := group(b.prefix, resp.Kvs)
		if resp.More {
			if len(groups) < 2 {
				fetch *= 2 // one key's records fill the page: not ours
				continue
			}
			// The last key's records may go on past the page.
			start = b.prefix + groups[len(groups)-1].encoded + "/"
			groups = groups[:len(groups)-1]
		}
		for _, g := range groups {
			if len(page) == limit {
				b.fillTimes(ctx, page, timed)
				return page, g.encoded, nil
			}
			info, leaseID, ok := g.info(prefix)
			if !ok {
				continue
			}
			page = append(page, info)
			timed = append(timed, leaseID)
		}
		if !resp.More {
			b.fillTimes(ctx, page, timed)
			return page, "", nil
		}
	}
}

// fillTimes fills the times left of page's keys, leases[i] being page[i]'s
// etcd lease to ask (0 for none, see records.timed), a few requests at a
// time.
func (b *Backend) fillTimes(ctx context.Context, page []backend.KeyInfo, leases []int64) {
	const inFlight = 8
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := range page {
		if leases[i] == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			b.fillTime(ctx, &page[i].State, leases[i])
		})
	}
	wg.Wait()
}

// records are one user key's records in a range read.
type records struct {
	encoded          string // the key's encoding
	lease, id, delay *mvccpb.KeyValue
}

// group gathers a sorted range's records by user key. A key's records are
// adjacent: any etcd key between two of them begins with the same
// "<prefix><encoding>/".
func group(prefix string, kvs []*mvccpb.KeyValue) []records {
	var gs []records
	for _, kv := range kvs {
		enc, rec, ok := splitRecord(prefix, string(kv.Key))
		if !ok {
			continue
		}
		if len(gs) == 0 || gs[len(gs)-1].encoded != enc {
			gs = append(gs, records{encoded: enc})
		}
		g := &gs[len(gs)-1]
		switch rec {
		case leaseRecord:
			g.lease = kv
		case idRecord:
			g.id = kv
		case delayRecord:
			g.delay = kv
		}
	}
	return gs
}

// info returns the listing of g's key and the etcd lease whose time left
// fills its state (see records.timed), if the key begins with prefix and g
// is a leased key's records.
func (g records) info(prefix string) (backend.KeyInfo, int64, bool) {
	raw, err := encoding.DecodeString(g.encoded)
	if err != nil || g.id == nil || !strings.HasPrefix(string(raw), prefix) {
		return backend.KeyInfo{}, 0, false
	}
	return backend.KeyInfo{Key: string(raw), State: g.state()}, g.timed(), true
}
