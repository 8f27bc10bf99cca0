package memorybackend

import "encoding/binary"

// The storage layout: one record per key, deleted once the key has been
// idle for the retention (see WithRetention and sweep.go).
//
// A record is 8-byte aligned in an arena chunk and moves only when its
// shard is compacted (see shard.compact):
//
//	offset  size  field
//	0       8     token: the highest token ever minted for the key
//	8       8     fingerprint of the ID of the key's most recent lease,
//	              once that lease has ended (see the package doc)
//	16      8     idle since: once that lease has ended and its lock
//	              delay is over, when that happened on the backend's clock
//	              (see Backend.now); the retention counts from it
//	24      4     state: stateReleased, stateExpired, or stateLive + the
//	              index of the key's liveLease
//	28      2     key length
//	30      n     key bytes
//
// A record is named by a ref: its byte offset in the shard's arena divided
// by 8, the arena being chunks of chunkSize bytes that no record straddles.
const (
	stateReleased = 0 // the most recent lease was released
	stateExpired  = 1 // the most recent lease expired
	stateLive     = 2 // stateLive + i: the lease in live[i], live until it expires

	recordHeader = 30
	chunkBits    = 16
	chunkSize    = 1 << chunkBits
	refChunk     = chunkBits - 3 // a ref's bits below this are the offset/8 in a chunk
	minArena     = 64
	minIndex     = 4
)

// record is a record's bytes, from its start.
type record []byte

func (r record) token() uint64           { return binary.LittleEndian.Uint64(r[0:]) }
func (r record) setToken(t uint64)       { binary.LittleEndian.PutUint64(r[0:], t) }
func (r record) fingerprint() uint64     { return binary.LittleEndian.Uint64(r[8:]) }
func (r record) setFingerprint(f uint64) { binary.LittleEndian.PutUint64(r[8:], f) }
func (r record) idleSince() int64        { return int64(binary.LittleEndian.Uint64(r[16:])) }
func (r record) setIdleSince(t int64)    { binary.LittleEndian.PutUint64(r[16:], uint64(t)) }
func (r record) state() uint32           { return binary.LittleEndian.Uint32(r[24:]) }
func (r record) setState(s uint32)       { binary.LittleEndian.PutUint32(r[24:], s) }
func (r record) keyLen() int             { return int(binary.LittleEndian.Uint16(r[28:])) }
func (r record) size() int               { return (recordHeader + r.keyLen() + 7) &^ 7 }
func (r record) key() []byte {
	n := r.keyLen()
	return r[recordHeader : recordHeader+n]
}

func (s *shard) record(ref uint32) record { return recordIn(s.arena, ref) }

// recordIn returns the record ref in arena.
func recordIn(arena [][]byte, ref uint32) record {
	return arena[ref>>refChunk][(ref&(1<<refChunk-1))<<3:]
}
