package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

// The line of waiters (backend.Queuer), as etcd's own concurrency.Mutex
// keeps its waiters: one etcd key per entry under the key's line prefix,
// "<prefix><base64url(k)>/w/<base64url(waiter ID)>", each attached to an
// etcd lease of its own of the entry's TTL, and ordered by CreateRevision,
// which a renewal (a keep-alive of that etcd lease) never changes. An entry
// whose etcd lease runs out is deleted by etcd's revoke: it leaves the line
// without anyone's help, up to 500ms after its TTL (the leader's check),
// and counts as ahead until then.

// entry is the value of a line entry: the seconds of its etcd lease, so
// that Dequeue can give the etcd lease to the pool.
type entry struct {
	asked   int64 // seconds asked for
	granted int64 // seconds granted by etcd
}

// A line entry's value is "v1:<asked>:<granted>".
const entryVersion = "v1"

func (e entry) encode() string {
	return entryVersion + ":" + strconv.FormatInt(e.asked, 10) + ":" + strconv.FormatInt(e.granted, 10)
}

// errMalformedEntry is returned for a line entry the backend did not write.
var errMalformedEntry = errors.New("etcdbackend: malformed line entry")

func decodeEntry(v []byte) (entry, error) {
	parts := strings.Split(string(v), ":")
	if len(parts) != 3 || parts[0] != entryVersion {
		return entry{}, fmt.Errorf("%w (%d bytes)", errMalformedEntry, len(v))
	}
	var e entry
	var err1, err2 error
	e.asked, err1 = strconv.ParseInt(parts[1], 10, 64)
	e.granted, err2 = strconv.ParseInt(parts[2], 10, 64)
	if errors.Join(err1, err2) != nil {
		return entry{}, fmt.Errorf("%w (%d bytes): bad number", errMalformedEntry, len(v))
	}
	return e, nil
}

// entryLeases remembers the etcd lease of each entry this backend made (or
// moved), so that Enqueue can send a renewal's keep-alive together with its
// read of the line: one round trip instead of two. It is a hint only: the
// read tells whether the entry is still on that etcd lease, and Enqueue
// goes the long way when it is not. It holds at most entriesMax entries,
// and forgets them all when full.
type entryLeases struct {
	mu sync.Mutex
	m  map[string]clientv3.LeaseID
}

// entriesMax bounds the entries a backend remembers.
const entriesMax = 4096

func (e *entryLeases) get(entry string) clientv3.LeaseID {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[entry]
}

func (e *entryLeases) set(entry string, id clientv3.LeaseID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil || len(e.m) >= entriesMax {
		e.m = make(map[string]clientv3.LeaseID)
	}
	e.m[entry] = id
}

func (e *entryLeases) remove(entry string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, entry)
}

// entryKey returns the etcd key of waiterID's entry in k's line.
func entryKey(k keys, waiterID string) string {
	return k.line + encoding.EncodeToString([]byte(waiterID))
}

// Enqueue implements backend.Queuer. It reads the whole line (one range
// read of the entries' keys and values, sorted by CreateRevision). When
// waiterID's entry is in it, one keep-alive of the entry's etcd lease renews
// it, and Ahead is the number of entries before it in that read (the
// keep-alive proves the entry was live then); when this backend made the
// entry, it knows that etcd lease and sends the keep-alive at the same time
// as the read: one round trip. When the entry is not in the line, Enqueue
// takes an etcd lease (from the pool, or LeaseGrant) and creates the entry
// in one Txn that also counts the line. A renewal asking for other seconds
// than the entry has moves it to a new etcd lease, keeping its
// CreateRevision (its place), as Renew moves a lease key. An entry whose
// etcd lease has run out but which etcd has not yet deleted is deleted, and
// the waiter joins at the end. Place.TTL is whole seconds; AheadRemaining
// is zero: the watch of NotifyTurn sees an entry's expiry, so a waiter need
// not look again.
func (b *Backend) Enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, error) {
	if err := b.ready(ctx, backend.CheckEnqueue(key, waiterID, ttl)); err != nil {
		return backend.Place{}, err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	k := b.keys(key)
	me := entryKey(k, waiterID)
	asked := seconds(ttl, 0)
	const attempts = 3
	for attempt := range attempts {
		// The entry's etcd lease, when this backend made the entry: its
		// keep-alive goes out with the read of the line.
		var hint clientv3.LeaseID
		if attempt == 0 {
			hint = b.entries.get(me)
		}
		var renewed keepResult
		var wg sync.WaitGroup
		if hint != 0 {
			wg.Go(func() { renewed = b.renewLease(ctx, hint) })
		}
		resp, err := b.kv.Get(ctx, k.line, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		wg.Wait()
		if err != nil {
			return backend.Place{}, fmt.Errorf("etcdbackend: read line: %w", err)
		}
		ahead := -1
		for i, kv := range resp.Kvs {
			if string(kv.Key) == me {
				ahead = i
				break
			}
		}
		if hint != 0 {
			if ahead >= 0 && resp.Kvs[ahead].Lease == int64(hint) {
				place, err := b.renewed(ctx, me, resp.Kvs[ahead], asked, renewed)
				if errors.Is(err, errJoinAgain) {
					continue
				}
				if !errors.Is(err, errMoved) {
					place.Ahead = ahead
					return place, err
				}
			} else {
				b.entries.remove(me) // the entry is not the one made here
			}
		}
		if ahead < 0 {
			place, err := b.join(ctx, me, k, asked)
			if errors.Is(err, errJoinAgain) {
				continue
			}
			return place, err
		}
		place, err := b.stay(ctx, me, resp.Kvs[ahead], asked)
		if errors.Is(err, errJoinAgain) {
			continue
		}
		place.Ahead = ahead
		return place, err
	}
	return backend.Place{}, fmt.Errorf("%w: etcdbackend: enqueue: the entry kept changing", backend.ErrOutcomeUnknown)
}

// keepResult is the outcome of a keep-alive.
type keepResult struct {
	ttl  int64
	sent bool
	err  error
}

// renewLease renews etcd lease id once, on the backend's shared keep-alive
// stream when it can (see keepalive.go), else on a stream of its own.
func (b *Backend) renewLease(ctx context.Context, id clientv3.LeaseID) keepResult {
	ttl, err := b.keeper.renew(ctx, id)
	if !errors.Is(err, errNoStream) {
		return keepResult{ttl: ttl, sent: true, err: err}
	}
	ttl, sent, err := b.keepAliveOnce(ctx, id)
	return keepResult{ttl: ttl, sent: sent, err: err}
}

// renewed answers an Enqueue whose keep-alive of the entry kv's etcd lease
// went out with its read of the line: the read found the entry on that etcd
// lease, and a successful keep-alive proves it live then (it cannot expire
// between the two: the keep-alive gave it a full TTL, and etcd never renews
// an expired lease). errMoved means the entry asks for other seconds: Enqueue
// goes on as without the hint.
func (b *Backend) renewed(ctx context.Context, me string, kv *mvccpb.KeyValue, asked int64, r keepResult) (backend.Place, error) {
	e, err := decodeEntry(kv.Value)
	if err != nil {
		return backend.Place{}, err
	}
	if e.asked != asked {
		return backend.Place{}, errMoved
	}
	switch {
	case r.err == nil:
		return backend.Place{TTL: time.Duration(r.ttl) * time.Second}, nil
	case errors.Is(r.err, rpctypes.ErrLeaseNotFound):
		return backend.Place{}, b.leave(ctx, me, kv)
	}
	return backend.Place{}, mutationError("keep-alive", r.err, r.sent)
}

// errJoinAgain means Enqueue should read the line again: the entry it read
// is gone, or one appeared that it did not read.
var errJoinAgain = errors.New("etcdbackend: enqueue: read the line again")

// join creates waiter's entry me at the end of k's line, on an etcd lease
// of asked seconds, and counts the entries before it in the same Txn.
func (b *Backend) join(ctx context.Context, me string, k keys, asked int64) (backend.Place, error) {
	el, err := b.acquire(ctx, asked, false)
	if err != nil {
		return backend.Place{}, err
	}
	tctx, p := track(ctx)
	resp, err := b.kv.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(me), "=", 0)).
		Then(
			clientv3.OpPut(me, entry{asked: asked, granted: el.ttl}.encode(), clientv3.WithLease(el.id)),
			clientv3.OpGet(k.line, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		).
		Commit()
	if err != nil {
		err = mutationError("enqueue txn", err, reached(p))
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			b.revoke(ctx, el.id)
		}
		return backend.Place{}, err
	}
	if !resp.Succeeded {
		b.recycle(ctx, el.id, asked, el.ttl, el.set) // a concurrent Enqueue of the same waiter made it
		return backend.Place{}, errJoinAgain
	}
	b.entries.set(me, el.id)
	// The count includes the entry just put, the line's newest.
	n := resp.Responses[1].GetResponseRange().Count
	return backend.Place{Ahead: int(n - 1), TTL: time.Duration(el.ttl) * time.Second}, nil
}

// stay renews the entry kv of the line for asked seconds, keeping its place.
// An entry that ran out is deleted, and errJoinAgain returned.
func (b *Backend) stay(ctx context.Context, me string, kv *mvccpb.KeyValue, asked int64) (backend.Place, error) {
	e, err := decodeEntry(kv.Value)
	if err != nil {
		return backend.Place{}, err
	}
	id := clientv3.LeaseID(kv.Lease)
	if e.asked != asked {
		return b.move(ctx, me, kv, asked)
	}
	r := b.renewLease(ctx, id)
	if r.err == nil {
		return backend.Place{TTL: time.Duration(r.ttl) * time.Second}, nil
	}
	if !errors.Is(r.err, rpctypes.ErrLeaseNotFound) {
		return backend.Place{}, mutationError("keep-alive", r.err, r.sent)
	}
	return backend.Place{}, b.leave(ctx, me, kv)
}

// leave deletes the entry kv, whose etcd lease ran out but which etcd has
// not deleted yet, unless it changed since, and returns errJoinAgain.
func (b *Backend) leave(ctx context.Context, me string, kv *mvccpb.KeyValue) error {
	b.entries.remove(me)
	_, err := b.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(me), "=", kv.CreateRevision)).
		Then(clientv3.OpDelete(me)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdbackend: enqueue: delete expired entry: %w", err)
	}
	return errJoinAgain
}

// move moves the entry kv to a new etcd lease of asked seconds, keeping its
// CreateRevision, and then revokes the old etcd lease; as Renew's relet, it
// counts only if the old etcd lease was live at the move, which a keep-alive
// of it after the move proves.
func (b *Backend) move(ctx context.Context, me string, kv *mvccpb.KeyValue, asked int64) (backend.Place, error) {
	lg, err := b.cli.Grant(ctx, asked)
	if err != nil {
		return backend.Place{}, fmt.Errorf("etcdbackend: lease grant: %w", err)
	}
	old := clientv3.LeaseID(kv.Lease)
	tctx, p := track(ctx)
	resp, err := b.kv.Txn(tctx).
		If(
			clientv3.Compare(clientv3.CreateRevision(me), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.LeaseValue(me), "=", old),
		).
		Then(clientv3.OpPut(me, entry{asked: asked, granted: lg.TTL}.encode(), clientv3.WithLease(lg.ID))).
		Commit()
	if err != nil {
		err = mutationError("enqueue txn", err, reached(p))
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			b.revoke(ctx, lg.ID)
		}
		return backend.Place{}, err
	}
	if !resp.Succeeded {
		b.revoke(ctx, lg.ID)
		return backend.Place{}, errJoinAgain
	}
	if _, sent, err := b.keepAliveOnce(ctx, old); err != nil {
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return backend.Place{}, mutationError("keep-alive", err, sent)
		}
		// The entry had run out: it leaves the line, and joins anew.
		b.revoke(ctx, lg.ID) // deletes the entry, now on lg
		return backend.Place{}, errJoinAgain
	}
	b.revoke(ctx, old)
	b.entries.set(me, lg.ID)
	return backend.Place{TTL: time.Duration(lg.TTL) * time.Second}, nil
}

// Dequeue implements backend.Queuer with one Txn that deletes the entry; its
// etcd lease, which then carries nothing, goes to the pool (see pool.go).
func (b *Backend) Dequeue(ctx context.Context, key, waiterID string) error {
	if err := b.ready(ctx, backend.CheckWaiter(key, waiterID)); err != nil {
		return err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	me := entryKey(b.keys(key), waiterID)
	b.entries.remove(me)
	tctx, p := track(ctx)
	resp, err := b.kv.Txn(tctx).Then(clientv3.OpDelete(me, clientv3.WithPrevKV())).Commit()
	if err != nil {
		return mutationError("dequeue txn", err, reached(p))
	}
	b.recycleDeleted(ctx, resp.Responses[0])
	return nil
}

// LineLength implements backend.LineReader with one linearizable count of
// the line's entries (a range read of the line's prefix, count only). An
// entry whose etcd lease ran out counts until etcd's revoke deletes it, up
// to 500ms after its TTL, as it counts as ahead for Enqueue.
func (b *Backend) LineLength(ctx context.Context, key string) (int, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, err
	}
	resp, err := b.kv.Get(ctx, b.keys(key).line, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdbackend: line length: %w", err)
	}
	return int(resp.Count), nil
}

// NotifyTurn implements backend.Queuer with an etcd watch on one key at a
// time, so that a handoff wakes only the waiter directly behind: the entry
// directly ahead of waiterID's, for its deletion (a Dequeue, or etcd's
// revoke when it expired); at the head, waiterID's own entry, for its
// deletion; while waiterID has no entry, that entry, for its creation.
// After each event it reads the line again and watches the next key. It
// wakes the waiter when the entry ahead or its own left, and when its own
// entry appeared unless an entry is still ahead of it then (the waiter's
// Enqueue counted those, and the watch of the one directly ahead covers
// them: the waiter cannot reach the head before that one leaves).
// It returns once the first watch is in place. When a watch breaks (a lost
// leader, a compaction), it wakes the waiter, reads the line again and
// watches anew, with a growing pause while that fails. The channel is
// closed when the backend or the etcd client is closed.
func (b *Backend) NotifyTurn(ctx context.Context, key, waiterID string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckWaiter(key, waiterID)); err != nil {
		return nil, err
	}
	if err := b.addSub(); err != nil {
		return nil, err
	}

	k := b.keys(key)
	rctx, cancel := context.WithCancel(clientv3.WithRequireLeader(b.ctx))
	t := &turn{
		b:      b,
		line:   k.line,
		me:     entryKey(k, waiterID),
		freed:  make(chan struct{}, 1),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	stop := context.AfterFunc(ctx, cancel)
	w, err := t.target(rctx, clientv3.WithCreatedNotify())
	if err == nil {
		_, err = b.created(rctx, w.ch)
	}
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if w.cancel != nil {
			w.cancel()
		}
		cancel()
		close(t.done)
		b.subs.Done()
		return nil, err
	}
	go t.run(rctx, w)
	return t, nil
}

// turn is a watch set up by NotifyTurn.
type turn struct {
	b      *Backend
	line   string // the line's prefix
	me     string // the waiter's entry
	freed  chan struct{}
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
}

// Freed implements backend.Subscription.
func (t *turn) Freed() <-chan struct{} { return t.freed }

// Close implements backend.Subscription: it ends the watch and waits for its
// goroutine.
func (t *turn) Close() error {
	t.cancel()
	<-t.done
	return nil
}

// turnWatch is one watch of a turn, on the key it chose.
type turnWatch struct {
	ch     clientv3.WatchChan
	cancel context.CancelFunc // ends this watch alone
	ahead  bool               // it watches the entry directly ahead
	absent bool               // it watches for the waiter's entry to appear
}

// target reads the line and watches the key that tells the waiter's turn
// may have come, from the revision after the read.
func (t *turn) target(ctx context.Context, opts ...clientv3.OpOption) (turnWatch, error) {
	resp, err := t.b.kv.Get(ctx, t.line, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return turnWatch{}, fmt.Errorf("etcdbackend: read line: %w", err)
	}
	watched, filter := t.me, clientv3.WithFilterPut() // at the head: our own deletion
	found := false
	for i, kv := range resp.Kvs {
		if string(kv.Key) == t.me {
			found = true
			if i > 0 {
				watched = string(resp.Kvs[i-1].Key) // the entry directly ahead
			}
			break
		}
	}
	if !found {
		filter = clientv3.WithFilterDelete() // not in line: our creation
	}
	wctx, cancel := context.WithCancel(ctx)
	opts = append(opts, filter, clientv3.WithRev(resp.Header.Revision+1))
	return turnWatch{
		ch:     t.b.watcher.Watch(wctx, watched, opts...),
		cancel: cancel,
		ahead:  watched != t.me,
		absent: !found,
	}, nil
}

// run wakes the waiter on the events of its watch and watches the next key,
// until ctx ends or the client closes.
func (t *turn) run(ctx context.Context, w turnWatch) {
	defer t.b.subs.Done()
	defer close(t.done)
	defer close(t.freed)
	defer func() {
		if w.cancel != nil {
			w.cancel()
		}
	}()
	pause := minRewatchPause
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-w.ch:
			if ctx.Err() != nil {
				return // closing: the watch broke because ctx ended; wake no one
			}
			healthy := ok && resp.Err() == nil
			if healthy && len(resp.Events) == 0 {
				continue // created, or progress
			}
			// When the waiter's own entry appeared, its Enqueue counted
			// the entries ahead, and the watch of the one directly ahead
			// covers them: it is woken only if no entry is ahead by now.
			appeared := healthy && w.absent
			if !appeared {
				t.wake()
			}
			if healthy {
				pause = minRewatchPause
			}
			w.cancel()
			if !t.retarget(ctx, &w, healthy, &pause) {
				return
			}
			if appeared && !w.ahead {
				t.wake()
			}
		}
	}
}

// retarget reads the line and watches the next key, trying until it can
// (after a pause when the watch broke, or a try failed: each failure wakes
// the waiter). It reports false when ctx ended or the client closed.
func (t *turn) retarget(ctx context.Context, w *turnWatch, healthy bool, pause *time.Duration) bool {
	for {
		if t.b.cli.Ctx().Err() != nil {
			return false // the client is closed: no watch can go on
		}
		if !healthy {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(*pause):
			}
			*pause = min(2**pause, maxRewatchPause)
		}
		next, err := t.target(ctx)
		if err == nil {
			*w = next
			return true
		}
		if ctx.Err() != nil {
			return false // closing: wake no one
		}
		*w = turnWatch{}
		healthy = false
		t.wake()
	}
}

// wake sends a wake-up unless one is pending.
func (t *turn) wake() {
	select {
	case t.freed <- struct{}{}:
	default:
	}
}
