package memorybackend

import (
	"context"
	"sync"

	"github.com/fencing-go/fencing/backend"
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
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
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
