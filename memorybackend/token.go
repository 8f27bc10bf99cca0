package memorybackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Token implements backend.Backend. It does not allocate.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, false, err
	}
	h, s := b.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref, found := s.find(h, key); found {
		r := s.record(ref)
		if l := s.lease(r.state()); l != nil && b.now() < l.expires {
			return r.token(), true, nil
		}
	}
	return 0, false, nil
}
