package memorybackend

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Reclaiming idle keys (WithRetention).
//
// A pass visits every index slot of every shard and deletes the record of
// each key that has been idle (no live lease, no lock delay) for the
// retention, raising the backend's floor to its token first, under its
// shard's lock: the lock that a later grant on the key takes, so that grant
// reads a floor at least the key's highest token and mints above it. The
// floor is the only state a deleted key leaves, and it is one number for
// the whole backend.
//
// No goroutine runs it: grants do, a bounded step each (sweepBudget slots,
// one shard lock at a time, taken after the grant has let go of its own), in
// the grant's goroutine, once a pass is due; a pass is due retention/8 after
// the last one ended, on the backend's clock. So a key is reclaimed by
// grants on other keys, never waiting for a call on itself, at most about
// retention/8 plus one pass after its retention has run out, and a backend
// that nobody calls keeps what it holds. While no pass is due, a grant pays
// one atomic load.
//
// At the end of a shard's visit, a shard whose arena is more than half dead
// records, or whose index is more than eight times what its records need,
// is compacted: its live records are copied into a new arena and index (Go
// maps and slices never shrink by themselves). Each compaction follows as
// many deletions as it copies records, so its cost per deleted key is
// constant. At the end of a pass, the lines of waiters drop their expired
// entries, and the lines left empty are forgotten.

// sweepBudget is how many index slots a grant's step of a pass visits.
const sweepBudget = 64

// sweeper is a backend's reclaiming pass: where it is, and when the next
// one starts.
type sweeper struct {
	due       atomic.Int64  // when the next pass is due; math.MaxInt64 when retention is off
	reclaimed atomic.Uint64 // keys reclaimed since New
	mu        sync.Mutex    // held by the grant doing a step
	every     int64         // the time from the end of a pass to the next
	shard     int           // the cursor: the shard and slot the next step starts at
	slot      uint32
}

// start schedules the first pass, a pass interval after New (whose clock
// reads 0).
func (w *sweeper) start(retention time.Duration) {
	if retention <= 0 {
		w.due.Store(math.MaxInt64)
		return
	}
	w.every = max(int64(retention)/8, 1)
	w.due.Store(w.every)
}

// drive does a step of the pass when one is due at now: grants call it once
// they have let go of their shards.
func (w *sweeper) drive(b *Backend, now int64) {
	if now >= w.due.Load() {
		w.step(b, now)
	}
}

// step visits up to sweepBudget index slots from the cursor, shard after
// shard, and ends the pass when the cursor has been round every shard. Only
// one grant steps at a time; the others go on.
func (w *sweeper) step(b *Backend, now int64) {
	if !w.mu.TryLock() {
		return
	}
	defer w.mu.Unlock()
	if now < w.due.Load() {
		return // another grant ended the pass meanwhile
	}
	for budget := sweepBudget; budget > 0; {
		s := &b.shards[w.shard]
		s.mu.Lock()
		var done bool
		w.slot, budget, done = b.sweepShard(s, w.slot, budget, now)
		if done {
			s.compactIfSparse()
		}
		s.mu.Unlock()
		if !done {
			return
		}
		w.slot, w.shard = 0, w.shard+1
		budget-- // an empty shard costs a visit too
		if w.shard == len(b.shards) {
			w.shard = 0
			b.sweepLines(now)
			w.due.Store(now + w.every)
			return
		}
	}
}

// sweepShard visits s's index slots from i, up to budget of them, at now,
// deleting the records of keys idle for the retention. It returns where to
// go on, the budget left, and whether it reached the index's end. The
// caller holds s.mu.
func (b *Backend) sweepShard(s *shard, i uint32, budget int, now int64) (uint32, int, bool) {
	retention := int64(b.retention)
	for ; budget > 0; budget-- {
		if i >= uint32(len(s.index)) {
			return 0, budget, true
		}
		slot := s.index[i]
		if slot == 0 {
			i++
			continue
		}
		ref := uint32(slot) - 1
		r := s.record(ref)
		if l := s.lease(r.state()); l != nil {
			if now < l.delayEnd() {
				i++ // live, or in its lock delay
				continue
			}
			s.end(ref, l.endState(), l.delayEnd(), b.idSeed) // reads as before
		}
		if now-r.idleSince() < retention {
			i++
			continue
		}
		b.raiseFloor(r.token())
		s.used -= uint32(r.size() >> 3)
		s.count--
		s.unplace(i)
		b.sweep.reclaimed.Add(1)
		// i again: unplace may have moved a later slot into it.
	}
	return i, 0, i >= uint32(len(s.index))
}

// raiseFloor raises the floor to token, if it is below.
func (b *Backend) raiseFloor(token uint64) {
	for {
		f := b.floor.Load()
		if f >= token || b.floor.CompareAndSwap(f, token) {
			return
		}
	}
}

// sweepLines drops the expired entries of every line of waiters, as a
// touch of the line would (waking the waiter behind each), and forgets the
// lines left with no entry and no subscription.
func (b *Backend) sweepLines(now int64) {
	l := &b.lines
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, ln := range l.byKey {
		ln.prune(now)
		l.drop(key, ln)
	}
}

// compactIfSparse compacts s when more than half its arena is deleted
// records, or its index is more than eight times the size its records
// need. The caller holds s.mu.
func (s *shard) compactIfSparse() {
	arena := 0
	for _, c := range s.arena {
		arena += len(c) >> 3
	}
	dead := arena - int(s.used)
	if dead > int(s.used) || len(s.index) > max(minIndex, 8*int(s.count)) {
		s.compact()
	}
}

// compact copies s's records into a new arena, in index order, and a new
// index of the smallest power of two at least twice the records (at least
// minIndex), or frees both when s has no record. A liveLease follows its
// record's new ref. The live-lease slice is freed too when no lease in it
// is in use. The caller holds s.mu.
func (s *shard) compact() {
	if !slices.ContainsFunc(s.live, func(l liveLease) bool { return l.id != "" }) {
		s.live, s.free, s.sweep = nil, 0, 0
	}
	oldIndex, used := s.index, int(s.used)<<3
	oldArena := slices.Clone(s.arena) // s.arena may be chunk0, which the new arena reuses
	s.index, s.arena, s.chunk0, s.used = nil, nil, [1][]byte{}, 0
	if s.count == 0 {
		return
	}
	s.arena = append(s.chunk0[:0], make([]byte, 0, min(chunkSize, max(minArena, used))))
	n := minIndex
	for n < 2*int(s.count) {
		n *= 2
	}
	s.index = make([]uint64, n)
	for _, slot := range oldIndex {
		if slot == 0 {
			continue
		}
		old := recordIn(oldArena, uint32(slot)-1)
		size := old.size()
		ref := s.allocRecord(size)
		copy(s.record(ref), old[:size])
		s.used += uint32(size >> 3)
		s.place(s.index, uint32(slot>>32), ref)
		if st := old.state(); st >= stateLive {
			s.live[st-stateLive].ref = ref
		}
	}
}

// Size implements backend.Sizer: the records held now (keys with a live
// lease, in a lock delay, or idle for less than the retention) and the keys
// reclaimed since New. It locks each shard in turn, so the count is each
// shard's at its moment, not one instant's.
func (b *Backend) Size(ctx context.Context) (backend.StoreSize, error) {
	if err := b.ready(ctx, nil); err != nil {
		return backend.StoreSize{}, err
	}
	var n int64
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		n += int64(s.count)
		s.mu.Unlock()
	}
	return backend.StoreSize{Records: n, Reclaimed: b.sweep.reclaimed.Load()}, nil
}
