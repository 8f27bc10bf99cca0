package memorybackend

import "encoding/binary"

// The storage layout: one record per key, never deleted.
//
// A record is 8-byte aligned in an arena chunk and never moves within it:
//
//	offset  size  field
//	0       8     token: the highest token ever minted for the key
//	8       8     fingerprint of the ID of the key's most recent lease,
//	              once that lease has ended (see the package doc)
//	16      4     state: stateReleased, stateExpired, or stateLive + the
//	              index of the key's liveLease
//	20      2     key length
//	22      n     key bytes
//
// A record is named by a ref: its byte offset in the shard's arena divided
// by 8, the arena being chunks of chunkSize bytes that no record straddles.
const (
	stateReleased = 0 // the most recent lease was released
	stateExpired  = 1 // the most recent lease expired
	stateLive     = 2 // stateLive + i: the lease in live[i], live until it expires

	recordHeader = 22
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
func (r record) state() uint32           { return binary.LittleEndian.Uint32(r[16:]) }
func (r record) setState(s uint32)       { binary.LittleEndian.PutUint32(r[16:], s) }
func (r record) key() []byte {
	n := int(binary.LittleEndian.Uint16(r[20:]))
	return r[recordHeader : recordHeader+n]
}

func (s *shard) record(ref uint32) record {
	return s.arena[ref>>refChunk][(ref&(1<<refChunk-1))<<3:]
}
