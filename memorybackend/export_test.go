package memorybackend

// PresetToken makes key look as if token had been its highest token, with no
// live lease: the conformance harness's TokenPresetter. Tests only.
func PresetToken(b *Backend, key string, token uint64) {
	h, s := b.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, ok := s.find(h, key)
	if !ok {
		s.insert(h, key, token, stateReleased, b.now())
		return
	}
	if s.record(ref).state() >= stateLive {
		s.end(ref, stateReleased, b.now(), b.idSeed)
	}
	s.record(ref).setToken(token)
}
