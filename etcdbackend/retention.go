package etcdbackend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

// Reclaiming idle keys (WithRetention).
//
// A key's lease key, delay record and line entries live on etcd leases:
// etcd deletes them when those run out. What stays is its ID record and
// released record, which a sweep deletes once the key has been idle (no
// lease key, no delay record, no line entry) for the retention.
//
// etcd keeps no time with a key, and nothing is written when a lease
// expires or a lock delay ends (etcd's revoke deletes a key), so the sweep
// writes the time itself: a pass that reads a key idle, with no mark newer
// than its other records, puts the key's idle mark, a record holding the
// wall-clock time just after that read. A key idle at the read became idle
// before it, so the mark is never early. A later pass that reads the key
// still idle, its mark still newer than every other record (every grant
// writes the ID record, every release and forced release the released
// record, so a mark older than either is stale and is put again), and the
// mark at least the retention old, deletes all the key's records. A mark
// holds a wall-clock time so that any backend on the prefix, in any
// process, after any restart, can judge it; a clock off by s reclaims s
// early or late, which costs no rule but a resend's same answer.
//
// Both writes are one Txn per page of keys (up to sweepBatch), a nested Txn
// per key guarded by one comparison over the key's whole range of etcd keys:
// every ModRevision in it is at most the revision of the read. A grant (it
// writes the ID record and creates a lease key), an enqueue (it creates an
// entry) or a release since the read fails it, and that key's writes do not
// happen: the grant that raced in wins. The records of a key idle at the
// read are its ID, released and mark records only, which only a sweep
// deletes, so a deletion since the read does not pass unseen either.
//
// Tokens need nothing: a token is the CreateRevision of a lease key, the
// cluster's revision, which only grows, and a delete adds a revision.
//
// One goroutine per backend runs the passes, from New to Close: the first
// a random time within the pass interval (at most a minute) after New, then
// every retention/16 (at least minSweepEvery) after the last one ended. A
// key is therefore marked by the end of the first pass after it became
// idle, and deleted by the first pass at least the retention after its
// mark: within retention + 2×retention/16 + two passes' time of becoming
// idle, without any call.

// DefaultRetention is the retention of a backend made without
// WithRetention.
const DefaultRetention = 24 * time.Hour

// WithRetention sets how long a key's records outlive the key's last use
// (default DefaultRetention): once a key has had no live lease, no lock
// delay and no line entry for d, a sweep deletes its records, and the key
// then reads as one never leased; its next token is still above every
// token it had, as every token is (etcd's revision). d <= 0 keeps every
// record for ever, and runs no sweep. See the package doc's "Retention".
//
// The retention belongs to the prefix, not to one backend: every backend on
// a prefix sweeps all of its keys, so the shortest retention among them is
// the prefix's. Give every backend on a prefix (the CLI's too) the same one.
//
// The default, 24 hours, is long enough that no realistic pause outlives
// it (a stalled holder, a request resent after a partition: a resend after
// the retention may get a new lease instead of its verdict), and short
// enough that a workload of a key per job, order or file holds a day of
// keys, not every key it ever used, well inside etcd's 2 GiB quota.
func WithRetention(d time.Duration) Option {
	return func(b *Backend) { b.retention = max(d, 0) }
}

// A mark's value is "v1:<Unix time in nanoseconds>".
const sinceVersion = "v1"

func encodeSince(t time.Time) string {
	return sinceVersion + ":" + strconv.FormatInt(t.UnixNano(), 10)
}

func decodeSince(v []byte) (time.Time, error) {
	ver, ns, ok := strings.Cut(string(v), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || ver != sinceVersion || err != nil {
		return time.Time{}, fmt.Errorf("etcdbackend: malformed idle mark (%d bytes)", len(v))
	}
	return time.Unix(0, n), nil
}

const (
	// sweepPage is how many etcd keys a pass reads at a time.
	sweepPage = 1024
	// sweepBatch is how many keys' writes go in one Txn (etcd refuses a
	// Txn of more than 128 operations by default).
	sweepBatch = 64
	// sweepTimeout bounds each request of a pass.
	sweepTimeout = 10 * time.Second
	// minSweepEvery is the shortest time between passes.
	minSweepEvery = 50 * time.Millisecond
)

// sweeper is a backend's reclaiming loop.
type sweeper struct {
	every     time.Duration     // from the end of a pass to the next
	reclaimed atomic.Uint64     // keys deleted since New
	done      chan struct{}     // closed when the loop returns; nil when none runs
	hook      func(deletes int) // tests: run before each Txn, with the number of keys it deletes
	passed    func()            // tests: run after each pass
}

// startSweep starts the reclaiming loop, when the retention is on.
func (b *Backend) startSweep() {
	if b.retention <= 0 {
		return
	}
	b.sweep.every = max(b.retention/16, minSweepEvery)
	b.sweep.done = make(chan struct{})
	first := rand.N(min(b.sweep.every, time.Minute))
	go b.sweepLoop(first)
}

// sweepLoop runs a pass after first, then every sweep.every after the last
// one ended, until Close.
func (b *Backend) sweepLoop(first time.Duration) {
	defer close(b.sweep.done)
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		if err := b.sweepPass(b.ctx); err != nil && b.ctx.Err() == nil {
			b.logger.Debug("etcdbackend: reclaiming pass failed; trying again at the next", "error", err)
		}
		if b.sweep.passed != nil {
			b.sweep.passed()
		}
		t.Reset(b.sweep.every)
	}
}

// sweepPass reads every key under the prefix, a page at a time, and marks
// or deletes the idle ones.
func (b *Backend) sweepPass(ctx context.Context) error {
	ctx = clientv3.WithRequireLeader(ctx)
	start, end := b.prefix, clientv3.GetPrefixRangeEnd(b.prefix)
	limit := int64(sweepPage)
	for {
		rctx, cancel := context.WithTimeout(ctx, sweepTimeout)
		resp, err := b.kv.Get(rctx, start, clientv3.WithRange(end), clientv3.WithLimit(limit))
		cancel()
		if err != nil {
			return fmt.Errorf("etcdbackend: reclaim: range: %w", err)
		}
		// After the read: a key idle at its revision became idle before.
		now := time.Now()
		groups := idleGroups(b.prefix, resp.Kvs)
		if resp.More {
			if len(groups) < 2 {
				limit *= 2 // one key's records fill the page
				continue
			}
			// The last key's records may go on past the page.
			start = b.prefix + groups[len(groups)-1].encoded + "/"
			groups = groups[:len(groups)-1]
		}
		if err := b.sweepGroups(ctx, groups, resp.Header.Revision, now); err != nil {
			return err
		}
		if !resp.More {
			return nil
		}
	}
}

// idleGroup is one user key's records in a pass's read.
type idleGroup struct {
	encoded string
	busy    bool             // a lease key, delay record or line entry, or an etcd key that is not ours
	since   *mvccpb.KeyValue // the idle mark; nil for none
	newest  int64            // the highest ModRevision of its other records
}

// idleGroups gathers a sorted range's records by user key (as group does).
func idleGroups(prefix string, kvs []*mvccpb.KeyValue) []idleGroup {
	var gs []idleGroup
	for _, kv := range kvs {
		rest, _ := strings.CutPrefix(string(kv.Key), prefix)
		enc, rec, _ := strings.Cut(rest, "/")
		if len(gs) == 0 || gs[len(gs)-1].encoded != enc {
			gs = append(gs, idleGroup{encoded: enc})
		}
		g := &gs[len(gs)-1]
		switch rec {
		case idRecord, releasedRecord:
			g.newest = max(g.newest, kv.ModRevision)
		case sinceRecord:
			g.since = kv
		default: // lease key, delay record, line entries; or not ours
			g.busy = true
		}
	}
	return gs
}

// verdict is what a pass does with an idle key.
type verdict int

const (
	keep    verdict = iota // busy, or not idle for the retention yet
	mark                   // put its idle mark
	reclaim                // delete its records
)

// judge decides what to do with g, read at now.
func (b *Backend) judge(g idleGroup, now time.Time) verdict {
	if g.busy || g.encoded == "" {
		return keep
	}
	if _, err := encoding.DecodeString(g.encoded); err != nil {
		return keep // not ours
	}
	if g.since == nil || g.since.ModRevision < g.newest {
		return mark // no mark, or one put before the key's last use
	}
	t, err := decodeSince(g.since.Value)
	switch {
	case err != nil || t.After(now.Add(b.retention)):
		return mark // not a mark of ours, or one from a clock far ahead
	case now.Sub(t) >= b.retention:
		return reclaim
	}
	return keep
}

// sweepGroups marks or deletes groups' idle keys, read at revision rev and
// time now, sweepBatch keys to a Txn.
func (b *Backend) sweepGroups(ctx context.Context, groups []idleGroup, rev int64, now time.Time) error {
	var ops []clientv3.Op
	var deletes []string // the encoded key of each op that deletes, "" for a mark
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if b.sweep.hook != nil {
			b.sweep.hook(len(slices.DeleteFunc(slices.Clone(deletes), func(e string) bool { return e == "" })))
		}
		tctx, cancel := context.WithTimeout(ctx, sweepTimeout)
		defer cancel()
		resp, err := b.kv.Txn(tctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("etcdbackend: reclaim txn: %w", err)
		}
		for i, enc := range deletes {
			sub := resp.Responses[i].GetResponseTxn()
			if enc == "" || !sub.GetSucceeded() || sub.Responses[0].GetResponseDeleteRange().GetDeleted() == 0 {
				continue
			}
			b.sweep.reclaimed.Add(1)
			if raw, err := encoding.DecodeString(enc); err == nil {
				b.known.remove(string(raw))
			}
		}
		ops, deletes = ops[:0], deletes[:0]
		return nil
	}
	for _, g := range groups {
		v := b.judge(g, now)
		if v == keep {
			continue
		}
		base := b.prefix + g.encoded + "/"
		// Every etcd key of the user key is as the read saw it: nothing
		// written, nothing created since (see above).
		unchanged := clientv3.Compare(clientv3.ModRevision(base), "<", rev+1).WithPrefix()
		op := clientv3.OpPut(base+sinceRecord, encodeSince(now))
		enc := ""
		if v == reclaim {
			op, enc = clientv3.OpDelete(base, clientv3.WithPrefix()), g.encoded
		}
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{unchanged}, []clientv3.Op{op}, nil))
		deletes = append(deletes, enc)
		if len(ops) == sweepBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// Size implements backend.Sizer. Records is the number of etcd keys under
// the prefix, one count-only read: a key's records are two to five of
// them (the ID, released and idle-mark records while it is idle; the lease
// key and delay record while it is leased), and each line entry is one.
// Reclaimed is the number of keys whose records this backend's sweep
// deleted since New; the sweeps of other backends on the prefix count
// theirs.
func (b *Backend) Size(ctx context.Context) (backend.StoreSize, error) {
	if err := b.ready(ctx, nil); err != nil {
		return backend.StoreSize{}, err
	}
	resp, err := b.kv.Get(ctx, b.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return backend.StoreSize{}, fmt.Errorf("etcdbackend: count: %w", err)
	}
	return backend.StoreSize{Records: resp.Count, Reclaimed: b.sweep.reclaimed.Load()}, nil
}
