package memorybackend

// PresetToken makes key look as if token had been its highest token, with no
// live lease: the conformance harness's TokenPresetter. Tests only.
func PresetToken(b *Backend, key string, token uint64) {
	s := b.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = &record{token: token, released: true}
}
