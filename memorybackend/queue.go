package memorybackend

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// lines holds every key's line of waiters (backend.Queuer), apart from the
// lease shards: a line is touched a few times per handoff, not per check,
// so one mutex serves them all.
type lines struct {
	mu    sync.Mutex
	byKey map[string]*line // a key's line; gone when it has no entry and no subscription
}

// A line is one key's entries in join order, and the NotifyTurn
// subscriptions on it by waiter ID.
type line struct {
	entries []entry
	turns   map[string]map[*turnSub]struct{}
}

type entry struct {
	waiter  string
	expires int64 // on the backend's clock (see Backend.now)
}

// line returns key's line, made if create is set; nil otherwise. The caller
// holds l.mu.
func (l *lines) line(key string, create bool) *line {
	ln := l.byKey[key]
	if ln == nil && create {
		if l.byKey == nil {
			l.byKey = map[string]*line{}
		}
		ln = &line{}
		l.byKey[key] = ln
	}
	return ln
}

// drop forgets key's line once nothing is in it. The caller holds l.mu.
func (l *lines) drop(key string, ln *line) {
	if len(ln.entries) == 0 && len(ln.turns) == 0 {
		delete(l.byKey, key)
	}
}

// prune removes the entries that expired by now, waking the waiter behind
// each: the clock is read, not run, so an expiry is seen when the line is
// next touched.
func (ln *line) prune(now int64) {
	for i := 0; i < len(ln.entries); {
		if now < ln.entries[i].expires {
			i++
			continue
		}
		ln.remove(i)
	}
}

// remove takes out entry i and wakes the waiter that is now at i, the
// only one whose place ahead changed to the head's or nearer it.
func (ln *line) remove(i int) {
	ln.entries = slices.Delete(ln.entries, i, i+1)
	if i < len(ln.entries) {
		for sub := range ln.turns[ln.entries[i].waiter] {
			select {
			case sub.turn <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
}

func (ln *line) index(waiter string) int {
	return slices.IndexFunc(ln.entries, func(e entry) bool { return e.waiter == waiter })
}

// Enqueue implements backend.Queuer.
func (b *Backend) Enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, error) {
	if err := b.ready(ctx, backend.CheckEnqueue(key, waiterID, ttl)); err != nil {
		return backend.Place{}, err
	}
	b.lines.mu.Lock()
	defer b.lines.mu.Unlock()
	ln := b.lines.line(key, true)
	now := b.now()
	ln.prune(now)
	i := ln.index(waiterID)
	if i < 0 {
		i = len(ln.entries)
		ln.entries = append(ln.entries, entry{waiter: waiterID})
	}
	ln.entries[i].expires = now + int64(ttl)
	p := backend.Place{Ahead: i, TTL: ttl}
	if i > 0 {
		p.AheadRemaining = time.Duration(ln.entries[i-1].expires - now)
	}
	return p, nil
}

// Dequeue implements backend.Queuer. It wakes the waiter directly behind
// the entry it removes, and no other.
func (b *Backend) Dequeue(ctx context.Context, key, waiterID string) error {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return err
	}
	if backend.CheckLeaseID(waiterID) != nil {
		return nil // not an ID that can be in a line
	}
	b.lines.mu.Lock()
	defer b.lines.mu.Unlock()
	ln := b.lines.line(key, false)
	if ln == nil {
		return nil
	}
	ln.prune(b.now())
	if i := ln.index(waiterID); i >= 0 {
		ln.remove(i)
	}
	b.lines.drop(key, ln)
	return nil
}

// turnSub is a NotifyTurn subscription. A leave sends on turn under
// lines.mu; Close removes it under the same lock.
type turnSub struct {
	b           *Backend
	key, waiter string
	turn        chan struct{}
	once        sync.Once
}

func (s *turnSub) Freed() <-chan struct{} { return s.turn }

func (s *turnSub) Close() error {
	s.once.Do(func() {
		l := &s.b.lines
		l.mu.Lock()
		defer l.mu.Unlock()
		ln := l.line(s.key, false)
		if ln == nil {
			return
		}
		if set := ln.turns[s.waiter]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(ln.turns, s.waiter)
			}
		}
		l.drop(s.key, ln)
	})
	return nil
}

// NotifyTurn implements backend.Queuer. A Dequeue wakes only the waiter
// directly behind the entry that left. An expiry wakes it when the line is
// next touched (an Enqueue, a Dequeue, a NotifyTurn): the clock is read,
// not run, so a waiter that hears nothing looks again after its Place's
// AheadRemaining. Subscriptions cost no goroutine.
func (b *Backend) NotifyTurn(ctx context.Context, key, waiterID string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckWaiter(key, waiterID)); err != nil {
		return nil, err
	}
	sub := &turnSub{b: b, key: key, waiter: waiterID, turn: make(chan struct{}, 1)}
	b.lines.mu.Lock()
	defer b.lines.mu.Unlock()
	ln := b.lines.line(key, true)
	ln.prune(b.now())
	if ln.turns == nil {
		ln.turns = map[string]map[*turnSub]struct{}{}
	}
	set := ln.turns[waiterID]
	if set == nil {
		set = map[*turnSub]struct{}{}
		ln.turns[waiterID] = set
	}
	set[sub] = struct{}{}
	return sub, nil
}

// LineLength implements backend.LineReader.
func (b *Backend) LineLength(ctx context.Context, key string) (int, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, err
	}
	b.lines.mu.Lock()
	defer b.lines.mu.Unlock()
	ln := b.lines.line(key, false)
	if ln == nil {
		return 0, nil
	}
	now, n := b.now(), 0
	for _, e := range ln.entries {
		if now < e.expires {
			n++
		}
	}
	return n, nil
}
