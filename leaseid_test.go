package fencing

import (
	"strings"
	"testing"
)

// TestLeaseIDCharacters checks newLeaseID's encoding: 26 characters of the
// base32 alphabet, every position taking every character, and no two
// positions drawn from the same bits.
func TestLeaseIDCharacters(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	c := &Coordinator{ids: newIDSource()}
	const n = 4000
	var seen [26][256]int
	var same [26][26]int // same[i][j]: IDs whose characters i and j are equal
	ids := make(map[string]bool, n)
	for range n {
		id := c.newLeaseID()
		if len(id) != 26 {
			t.Fatalf("lease ID %q: %d characters, want 26", id, len(id))
		}
		if ids[id] {
			t.Fatalf("lease ID %q made twice", id)
		}
		ids[id] = true
		for i := range len(id) {
			if !strings.ContainsRune(alphabet, rune(id[i])) {
				t.Fatalf("lease ID %q: %q is not in the base32 alphabet", id, id[i])
			}
			seen[i][id[i]]++
			for j := range i {
				if id[i] == id[j] {
					same[i][j]++
				}
			}
		}
	}
	for i := range seen {
		for _, ch := range []byte(alphabet) {
			// Expected n/32 = 125 each; 40 is far in the tail.
			if seen[i][ch] < 40 {
				t.Errorf("position %d: %q in %d of %d IDs, want about %d", i, ch, seen[i][ch], n, n/32)
			}
		}
		for j := range i {
			// Independent positions agree in about n/32 IDs.
			if same[i][j] > 3*n/32 {
				t.Errorf("positions %d and %d agree in %d of %d IDs, want about %d", j, i, same[i][j], n, n/32)
			}
		}
	}
}
