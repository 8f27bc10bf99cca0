package memorybackend

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"
)

// A shard holds the keys whose hash chooses it, in a layout made for many
// keys whose leases have ended: such a key is one small record in an arena
// of bytes, with no pointer for the garbage collector to trace, and a slot
// in an open-addressing index. Only a live lease has more: a liveLease,
// which holds its ID.
//
// # Index
//
// The index is a power-of-two array of uint64 slots, linear probing; a
// deletion (a reclaimed key, see sweep.go) shifts the slots after it back,
// so no tombstone is left. A slot is 0 when empty, and
// otherwise hash<<32 | (ref+1), where hash is the low 32 bits of the key's
// hash: the slot's home is hash & mask, and a probe compares the key's
// bytes only when all 32 bits match. The index doubles when it is 7/8 full.
//
// # Cache lines
//
// A shard is two cache lines. The first holds what every operation writes
// (the lock, the free list, the sweep) or reads (the index and live
// slices), so an operation on a shard that another core used last moves
// one line of it between the cores, not two; the second holds what only
// inserts and waiters change.
type shard struct {
	mu    sync.Mutex
	free  uint32 // 1 + the first free liveLease, 0 when none
	sweep uint32 // the liveLease the next sweep looks at
	index []uint64
	live  []liveLease

	arena  [][]byte                              // chunks; only the last one grows
	count  uint32                                // records
	used   uint32                                // the records' bytes / 8
	subs   map[string]map[*subscription]struct{} // NotifyFree waiters; nil until the first
	chunk0 [1][]byte                             // arena's backing array while it has one chunk
}

// A liveLease is the part of a live lease that an ended one does not need.
// A free one has an empty id, and next holds the free list.
//
// A lease with a lock delay keeps its liveLease through the delay after an
// unclean end, so that the delay costs the many keys whose leases ended
// cleanly nothing: live on [grant, expires), then closed to grants on
// [expires, expires+delay). A forced release ends it by setting expires to
// the moment of the release and ttl to zero (a granted lease's ttl is at
// least backend.MinTimeout), which marks it forced: its ID then reads as
// released, not expired.
type liveLease struct {
	id      string
	owner   string
	expires int64 // on the backend's clock (see Backend.now)
	ttl     time.Duration
	margin  time.Duration
	delay   time.Duration // the lock delay (backend.Request.LockDelay)
	ref     uint32        // the key's record; when free, 1 + the next free one
}

// forced reports that a forced release ended l (see liveLease).
func (l *liveLease) forced() bool { return l.ttl == 0 }

// delayEnd is when l's lock delay ends, once l has ended: no grant on its
// key succeeds before then.
func (l *liveLease) delayEnd() int64 { return l.expires + int64(l.delay) }

// endState is the record state of l once it has ended and its delay is
// over: released after a forced release, expired otherwise.
func (l *liveLease) endState() uint32 {
	if l.forced() {
		return stateReleased
	}
	return stateExpired
}

// forceEnd ends l now, at now: at once when it has no lock delay (the
// caller then ends its record), else by starting its delay (see liveLease).
// It reports whether the record is to be ended.
func (l *liveLease) forceEnd(now int64) (endRecord bool) {
	if l.delay == 0 {
		return true
	}
	l.expires, l.ttl, l.margin, l.owner = now, 0, 0, ""
	return false
}

// find returns the ref of key's record, whose hash is h, if there is one.
func (s *shard) find(h uint64, key string) (uint32, bool) {
	if len(s.index) == 0 {
		return 0, false
	}
	mask := uint32(len(s.index) - 1)
	for i := uint32(h) & mask; ; i = (i + 1) & mask {
		slot := s.index[i]
		if slot == 0 {
			return 0, false
		}
		if uint32(slot>>32) == uint32(h) {
			ref := uint32(slot) - 1
			if string(s.record(ref).key()) == key {
				return ref, true
			}
		}
	}
}

// insert adds a record for key, whose hash is h and which has none, with
// the given token, state and idle time, and returns its ref.
func (s *shard) insert(h uint64, key string, token uint64, state uint32, idle int64) uint32 {
	if int(s.count+1)*8 > len(s.index)*7 {
		s.growIndex()
	}
	n := (recordHeader + len(key) + 7) &^ 7
	ref := s.allocRecord(n)
	r := s.record(ref)
	r.setToken(token)
	r.setFingerprint(0)
	r.setIdleSince(idle)
	r.setState(state)
	binary.LittleEndian.PutUint16(r[28:], uint16(len(key)))
	copy(r[recordHeader:], key)
	s.place(s.index, uint32(h), ref)
	s.count++
	s.used += uint32(n >> 3)
	return ref
}

// place puts a slot for ref, whose key's hash is h, in its home in index or
// the first free slot after it.
func (s *shard) place(index []uint64, h uint32, ref uint32) {
	mask := uint32(len(index) - 1)
	i := h & mask
	for index[i] != 0 {
		i = (i + 1) & mask
	}
	index[i] = uint64(h)<<32 | uint64(ref+1)
}

func (s *shard) growIndex() {
	old := s.index
	s.index = make([]uint64, max(2*len(old), minIndex))
	for _, slot := range old {
		if slot != 0 {
			s.place(s.index, uint32(slot>>32), uint32(slot)-1)
		}
	}
}

// unplace empties index slot i and shifts back the slots after it that
// probed past it (backward-shift deletion), so every key stays reachable
// from its home without a tombstone. A slot moves only to a lower place in
// its probe sequence: from after i (cyclically) to i or a later hole.
func (s *shard) unplace(i uint32) {
	mask := uint32(len(s.index) - 1)
	hole := i
	for j := (i + 1) & mask; s.index[j] != 0; j = (j + 1) & mask {
		home := uint32(s.index[j]>>32) & mask
		// The slot at j may fill the hole unless its home lies cyclically
		// in (hole, j]: then it was never past the hole.
		if (j-home)&mask >= (j-hole)&mask {
			s.index[hole] = s.index[j]
			hole = j
		}
	}
	s.index[hole] = 0
}

// allocRecord returns the ref of n new bytes (rounded up to 8) at the end
// of the arena. The last chunk grows by a quarter at a time, up to
// chunkSize, so the arena wastes little memory beyond its records.
func (s *shard) allocRecord(n int) uint32 {
	n = (n + 7) &^ 7
	last := len(s.arena) - 1
	if last < 0 || len(s.arena[last])+n > chunkSize {
		if last < 0 {
			s.arena = s.chunk0[:0] // no allocation for a shard of one chunk
		}
		s.arena = append(s.arena, make([]byte, 0, max(minArena, n)))
		last++
	}
	c := s.arena[last]
	if len(c)+n > cap(c) {
		grown := make([]byte, len(c), min(chunkSize, max(len(c)+n, cap(c)+cap(c)/4)))
		copy(grown, c)
		c = grown
	}
	ref := uint32(last)<<refChunk | uint32(len(c)>>3)
	s.arena[last] = c[:len(c)+n]
	return ref
}

// addLive stores a live lease for the record ref and returns the record
// state that names it. Before that it sweeps: it looks at one other live
// lease and ends it if it has expired and its lock delay is over, so that
// expired leases on keys nobody touches again give their memory back as new
// leases are made.
func (s *shard) addLive(l liveLease, now int64, idSeed maphash.Seed) uint32 {
	if n := uint32(len(s.live)); n > 0 {
		s.sweep = (s.sweep + 1) % n
		if v := &s.live[s.sweep]; v.id != "" && now >= v.delayEnd() {
			s.end(v.ref, v.endState(), v.delayEnd(), idSeed)
		}
	}
	var i uint32
	if s.free != 0 {
		i = s.free - 1
		s.free = s.live[i].ref
	} else {
		i = uint32(len(s.live))
		s.live = append(s.live, liveLease{})
	}
	s.live[i] = l
	return stateLive + i
}

// end turns the live lease of the record ref into an ended one (state is
// stateReleased or stateExpired) that keeps only its ID's fingerprint and
// at, when the key became idle (the release, or the end of the lease's
// lock delay), and frees the liveLease.
func (s *shard) end(ref uint32, state uint32, at int64, idSeed maphash.Seed) {
	r := s.record(ref)
	i := r.state() - stateLive
	r.setFingerprint(maphash.String(idSeed, s.live[i].id))
	r.setIdleSince(at)
	r.setState(state)
	s.live[i] = liveLease{ref: s.free}
	s.free = i + 1
}

// lease returns the live lease named by a record state, or nil when the
// state is not a live one. The lease may have ended: expired, or forced out
// in its lock delay.
func (s *shard) lease(state uint32) *liveLease {
	if state < stateLive {
		return nil
	}
	return &s.live[state-stateLive]
}
