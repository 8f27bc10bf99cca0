package memorybackend

import (
	"testing"
	"unsafe"
)

// TestShardLayout checks the cache-line layout the shard's comment
// describes: two 64-byte lines, with everything an operation writes, and
// the slices it reads, on the first; and that New's shards start on a
// cache line.
func TestShardLayout(t *testing.T) {
	if p := uintptr(unsafe.Pointer(&New().shards[0])); p%64 != 0 {
		t.Errorf("the shards start at %#x, not on a cache line", p)
	}
	var s shard
	if n := unsafe.Sizeof(s); n != 128 {
		t.Errorf("a shard is %d bytes, want 128 (two cache lines)", n)
	}
	for name, end := range map[string]uintptr{
		"mu":    unsafe.Offsetof(s.mu) + unsafe.Sizeof(s.mu),
		"free":  unsafe.Offsetof(s.free) + unsafe.Sizeof(s.free),
		"sweep": unsafe.Offsetof(s.sweep) + unsafe.Sizeof(s.sweep),
		"index": unsafe.Offsetof(s.index) + unsafe.Sizeof(s.index),
		"live":  unsafe.Offsetof(s.live) + unsafe.Sizeof(s.live),
	} {
		if end > 64 {
			t.Errorf("shard.%s ends at byte %d, off the first cache line", name, end)
		}
	}
}
