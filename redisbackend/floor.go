package redisbackend

import (
	"strconv"
	"strings"
	"sync"
)

// The floor (see sweep.go): the highest token of any key this prefix's
// backends reclaimed, which a grant on a key with no record starts above.
// The reclaiming script raises it in the step that deletes a record, and
// the grant script reads it in the step that creates one, so both must
// reach it: on a standalone server (or a Sentinel's primary) that is one
// string key,
//
//	<prefix>floor
//
// and on a Cluster, where a script touches one hash slot, one key per slot
// that holds the backend's records,
//
//	<prefix>{<tag>}:floor
//
// with a tag chosen so that the name falls in the slot (a prefix with a
// hash tag of its own pins every record to its slot, and the floor is then
// <prefix>floor there too). A grant only reads its floor, and only when
// the key has no record: no grant writes a key that other keys share.

const floorSuffix = "floor"

// floors names the floor of each slot, for a Cluster client.
type floors struct {
	prefix string
	pinned bool // the prefix has a hash tag: one slot, one floor
	plain  bool // the prefix has no '{': a name's slot is its tag's alone

	mu    sync.Mutex
	names map[uint16]string // for a prefix with an unclosed '{'
}

func newFloors(prefix string) *floors {
	f := &floors{prefix: prefix}
	open := strings.IndexByte(prefix, '{')
	switch {
	case open < 0:
		f.plain = true
	case strings.IndexByte(prefix[open+1:], '}') > 0:
		f.pinned = true // a non-empty tag (checkPrefix refuses an empty one)
	default:
		f.names = make(map[uint16]string)
	}
	return f
}

// floorKey returns the name of the floor the record rk's scripts use.
func (b *Backend) floorKey(rk string) string {
	if b.floor != nil {
		return b.floor.(string)
	}
	return b.floors.of(keySlot(rk))
}

// floorArg is floorKey as a command's argument: boxed once, when every
// record has the same floor.
func (b *Backend) floorArg(rk string) any {
	if b.floor != nil {
		return b.floor
	}
	return b.floors.of(keySlot(rk))
}

// of returns the name of slot's floor.
func (f *floors) of(slot uint16) string {
	if f.plain {
		return f.prefix + "{" + slotTag(slot) + "}:" + floorSuffix
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.names[slot]; ok {
		return n
	}
	// The prefix's '{' opens the tag, which then runs into the name's own:
	// try names until one falls in slot (about 16384 tries).
	for i := 0; ; i++ {
		n := f.prefix + "{" + strconv.Itoa(i) + "}:" + floorSuffix
		if keySlot(n) == slot {
			f.names[slot] = n
			return n
		}
	}
}

// slotTags[s] is the smallest i whose decimal digits hash to slot s.
var (
	slotTagsOnce sync.Once
	slotTags     [slotCount]uint32
)

// slotTag returns a short hash tag that Redis Cluster puts in slot.
func slotTag(slot uint16) string {
	slotTagsOnce.Do(func() {
		left := slotCount
		var seen [slotCount]bool
		var buf []byte
		for i := uint32(0); left > 0; i++ {
			buf = strconv.AppendUint(buf[:0], uint64(i), 10)
			if s := crc16(buf) % slotCount; !seen[s] {
				seen[s], slotTags[s] = true, i
				left--
			}
		}
	})
	return strconv.FormatUint(uint64(slotTags[slot]), 10)
}

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// keySlot returns the Redis Cluster hash slot of the key name, by Redis's
// rule: the hash tag (between the first '{' and the first '}' after it)
// when it is not empty, else the whole name.
func keySlot(name string) uint16 {
	if open := strings.IndexByte(name, '{'); open >= 0 {
		if n := strings.IndexByte(name[open+1:], '}'); n > 0 {
			name = name[open+1 : open+1+n]
		}
	}
	return crc16([]byte(name)) % slotCount
}

// crc16 is CRC-16/XMODEM, Redis Cluster's key hash, a byte at a time.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^c]
	}
	return crc
}

// crcTable[i] is the CRC of the byte i.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
