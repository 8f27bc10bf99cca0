package memorybackend

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Inspect implements backend.Inspector.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return backend.KeyState{}, err
	}
	h, s := b.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return b.keyState(s, h, key), nil
}

// keyState returns key's KeyState; the zero KeyState for a key never
// leased. The caller holds s.mu.
func (b *Backend) keyState(s *shard, h uint64, key string) backend.KeyState {
	ref, found := s.find(h, key)
	if !found {
		return backend.KeyState{}
	}
	r := s.record(ref)
	st := backend.KeyState{MaxToken: r.token()}
	if l := s.lease(r.state()); l != nil {
		switch now := b.now(); {
		case now < l.expires:
			st.Live, st.Token, st.ExpiresAt, st.Remaining = true, r.token(), b.instant(l.expires), time.Duration(l.expires-now)
			st.Owner, st.LockDelay = l.owner, l.delay
		case now < l.delayEnd():
			st.DelayedUntil, st.DelayRemaining = b.instant(l.delayEnd()), time.Duration(l.delayEnd()-now)
		}
	}
	return st
}

// DefaultListLimit is the page size of List when the caller gives none.
const DefaultListLimit = 100

// List implements backend.Lister: keys in byte order; the cursor is the
// last key of the page before.
func (b *Backend) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	if err := b.ready(ctx, nil); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	var keys []string
	pre := []byte(prefix)
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		for _, slot := range s.index {
			if slot == 0 {
				continue
			}
			if k := s.record(uint32(slot) - 1).key(); bytes.HasPrefix(k, pre) && string(k) > cursor {
				keys = append(keys, string(k))
			}
		}
		s.mu.Unlock()
	}
	slices.Sort(keys)
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = keys[limit-1]
	}
	page := make([]backend.KeyInfo, 0, len(keys))
	for _, k := range keys {
		h, s := b.locate(k)
		s.mu.Lock()
		page = append(page, backend.KeyInfo{Key: k, State: b.keyState(s, h, k)})
		s.mu.Unlock()
	}
	return page, next, nil
}
