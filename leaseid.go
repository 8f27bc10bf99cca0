package fencing

import (
	cryptorand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"sync"
)

// idSource makes lease IDs from ChaCha8 streams, a cryptographically strong
// generator, each seeded with 256 bits from crypto/rand, so no ID tells
// anything about another. A ChaCha8 is not safe for concurrent use: the pool
// lends each to one goroutine at a time. Each Coordinator has its own.
type idSource struct{ pool sync.Pool } // of *rand.ChaCha8

// newIDSource returns an idSource whose pool is empty: next seeds a
// ChaCha8 when the pool has none to lend.
func newIDSource() *idSource { return &idSource{} }

// seededChaCha8 returns a ChaCha8 seeded with 256 bits from crypto/rand, for a
// pool that has none to lend.
func seededChaCha8() *rand.ChaCha8 {
	var seed [32]byte
	cryptorand.Read(seed[:]) // never fails: it crashes the program instead
	return rand.NewChaCha8(seed)
}

// next returns a fresh lease ID: 26 characters of the RFC 4648 base32
// alphabet, as crypto/rand.Text makes, each 5 random bits (130 in all), at
// a third of its cost.
func (s *idSource) next() string {
	g, _ := s.pool.Get().(*rand.ChaCha8)
	if g == nil {
		g = seededChaCha8()
	}
	a, b, d := g.Uint64(), g.Uint64(), g.Uint64()
	s.pool.Put(g)
	// Two characters (10 bits) at a time: 12 from each of a and b (60 of
	// their 64 bits), 2 from d.
	var id [26]byte
	for i := 0; i < 12; i += 2 {
		binary.LittleEndian.PutUint16(id[i:], base32Pairs[a&1023])
		binary.LittleEndian.PutUint16(id[12+i:], base32Pairs[b&1023])
		a, b = a>>10, b>>10
	}
	binary.LittleEndian.PutUint16(id[24:], base32Pairs[d&1023])
	return string(id[:])
}

// base32Pairs maps 10 bits to two characters of the RFC 4648 base32
// alphabet, the low 5 bits first, as little-endian uint16s.
var base32Pairs = func() (t [1024]uint16) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	for i := range t {
		t[i] = uint16(alphabet[i&31]) | uint16(alphabet[i>>5])<<8
	}
	return t
}()
