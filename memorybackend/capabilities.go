package memorybackend

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// The optional capabilities of package backend, all implemented here.
var (
	_ backend.Notifier      = (*Backend)(nil)
	_ backend.Inspector     = (*Backend)(nil)
	_ backend.ForceReleaser = (*Backend)(nil)
	_ backend.Lister        = (*Backend)(nil)
	_ backend.InProcess     = (*Backend)(nil)
)

// subscription is a NotifyFree waiter. A release sends on freed under the
// key's shard lock; Close removes it under the same lock.
type subscription struct {
	b     *Backend
	key   string
	freed chan struct{}
	once  sync.Once
}

func (s *subscription) Freed() <-chan struct{} { return s.freed }

func (s *subscription) Close() error {
	s.once.Do(func() {
		_, sh := s.b.locate(s.key)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if set := sh.subs[s.key]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(sh.subs, s.key)
			}
		}
	})
	return nil
}

// NotifyFree implements backend.Notifier: a release or forced release of a
// lease on key wakes every subscription on it. Expiry sends nothing (the
// clock is read, not run); a waiter sleeps until the holder's time is up, as
// backend.HeldError tells. Subscriptions cost no goroutine.
func (b *Backend) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	if err := backend.CheckKey(key); err != nil {
		return nil, err
	}
	sub := &subscription{b: b, key: key, freed: make(chan struct{}, 1)}
	_, sh := b.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.subs == nil {
		sh.subs = make(map[string]map[*subscription]struct{})
	}
	set := sh.subs[key]
	if set == nil {
		set = make(map[*subscription]struct{})
		sh.subs[key] = set
	}
	set[sub] = struct{}{}
	return sub, nil
}

// notify wakes key's subscriptions. The caller holds s.mu.
func (s *shard) notify(key string) {
	if len(s.subs) == 0 { // no waiter in the shard: skip the map lookup
		return
	}
	for sub := range s.subs[key] {
		select {
		case sub.freed <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// Inspect implements backend.Inspector.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx); err != nil {
		return backend.KeyState{}, err
	}
	if err := backend.CheckKey(key); err != nil {
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
		if now := b.now(); now < l.expires {
			st.Live, st.Token, st.ExpiresAt, st.Remaining = true, r.token(), b.instant(l.expires), time.Duration(l.expires-now)
			st.Owner = l.owner
		}
	}
	return st
}

// ForceRelease implements backend.ForceReleaser. The old holder's release
// then returns nil (its lease reads as released) and its renewals get
// backend.ErrLeaseNotFound.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx); err != nil {
		return false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return false, err
	}
	h, s := b.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, found := s.find(h, key)
	if !found {
		return false, nil
	}
	l := s.lease(s.record(ref).state())
	if l == nil || b.now() >= l.expires {
		return false, nil
	}
	s.end(ref, stateReleased, b.idSeed)
	s.notify(key)
	return true, nil
}

// DefaultListLimit is the page size of List when the caller gives none.
const DefaultListLimit = 100

// List implements backend.Lister: keys in byte order; the cursor is the
// last key of the page before.
func (b *Backend) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	if err := b.ready(ctx); err != nil {
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

// InProcess implements backend.InProcess: no request waits on anything
// outside the process, so package fencing adds no request timeout.
func (b *Backend) InProcess() {}
