package sqlbackend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// The lines of backend.Queuer live in the <prefix>waiters table (see
// records.go): an entry's seq is its place, and its expires_at is judged by
// the coordinator's clock, as a lease's is. Enqueue and Dequeue are one
// statement on PostgreSQL (the enqueue and dequeue functions, serialized per
// key by a transaction-scoped advisory lock) and one BEGIN IMMEDIATE
// transaction on SQLite, which serializes them by itself.
//
// NotifyTurn learns that an entry ahead left as NotifyFree learns of a
// release (notify.go):
//
//   - PostgreSQL with WithListener: the dequeue function NOTIFYs, when it
//     commits, with the key and the tag of the waiter now directly behind
//     the removed entry; only that waiter's subscriptions wake. An expiry
//     sends nothing: the waiter behind it looks again when
//     Place.AheadRemaining has passed.
//   - Otherwise the backend's polling goroutine reads, for each subscribed
//     waiter, which live entry is directly ahead of it (a read, never a
//     grant attempt), and wakes the waiter when that entry changed: when it
//     left by a Dequeue or by expiring. A waiter further back, whose entry
//     ahead stayed, does not wake.
//
// A Dequeue through this Backend also wakes its own subscription of the
// waiter behind at once.

// What a turn subscription saw of its waiter's place (subscription.seen):
// the seq of the live entry directly ahead, zero at the head, or one of
// these.
const (
	seenAbsent  = -1 // the waiter's entry is not in the line (not yet, or not any more)
	seenUnknown = -2 // not read yet, or the read failed
)

// turnWakes reports whether a waiter whose place was seen as prev (by the
// poll before, or told by its last Enqueue through this Backend) and is now
// cur should wake: the entry directly ahead of it changed, so it left (new
// entries join behind). A waiter whose own entry is gone (it expired) wakes
// too, to join again; one whose entry appeared (an Enqueue through another
// Backend) wakes once.
func turnWakes(prev, cur int64) bool { return cur != prev }

// turnTag names a waiter in a NOTIFY payload without revealing its ID,
// which is a credential: the first 128 bits of its SHA-256, in hex, as the
// dequeue function computes it.
func turnTag(waiterID string) string {
	sum := sha256.Sum256([]byte(waiterID))
	return hex.EncodeToString(sum[:16])
}

// Enqueue implements backend.Queuer: it renews waiterID's live entry, or
// drops the key's expired entries and puts a new one at the end, and reads
// the place, in one statement (PostgreSQL) or one transaction (SQLite).
func (b *Backend) Enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, error) {
	if err := b.ready(ctx, backend.CheckEnqueue(key, waiterID, ttl)); err != nil {
		return backend.Place{}, err
	}
	defer b.hub.telling(key, waiterID)()
	place, aheadSeq, err := b.dialect.enqueue(ctx, key, waiterID, ttl)
	if err != nil {
		return backend.Place{}, err
	}
	b.hub.sawTurn(key, waiterID, aheadSeq)
	return place, nil
}

// Dequeue implements backend.Queuer: it drops the key's expired entries,
// removes waiterID's and wakes the waiter now directly behind it (see the
// top of this file).
func (b *Backend) Dequeue(ctx context.Context, key, waiterID string) error {
	if err := b.ready(ctx, backend.CheckWaiter(key, waiterID)); err != nil {
		return err
	}
	defer b.hub.telling(key, waiterID)()
	behind, err := b.dialect.dequeue(ctx, key, waiterID)
	if err != nil {
		return err
	}
	b.hub.sawTurn(key, waiterID, seenAbsent)
	if behind != "" {
		b.hub.wakeTurn(key, behind)
	}
	return nil
}

// NotifyTurn implements backend.Queuer (see the top of this file). When it
// polls, it reads the waiter's place before it returns, so that a leave
// after NotifyTurn returns is told from that reading.
func (b *Backend) NotifyTurn(ctx context.Context, key, waiterID string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckWaiter(key, waiterID)); err != nil {
		return nil, err
	}
	sub := &subscription{h: &b.hub, key: key, freed: make(chan struct{}, 1), turn: true, waiterID: waiterID, tag: turnTag(waiterID), seen: seenUnknown}
	if b.listenDSN == "" { // no notification tells it: it polls
		if seen, err := b.dialect.turnPlaces(ctx, []*subscription{sub}); err == nil {
			sub.seen = seen[0]
		} else if ctx.Err() != nil {
			return nil, ctx.Err()
		} // else unknown: the first poll that reads it at the head wakes it
	}
	ready := b.hub.add(sub)
	select {
	case <-ready:
	case <-ctx.Done():
		sub.Close()
		return nil, ctx.Err()
	}
	return sub, nil
}

// absentPlaces is n places of waiters not in the line (turnPlaces).
func absentPlaces(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = seenAbsent
	}
	return out
}

// pollTurns reads the places of the subscribed waiters and wakes those
// whose entry ahead left (turnWakes); a failed read wakes them all.
func (h *hub) pollTurns(ctx context.Context) {
	h.mu.Lock()
	var subs []*subscription
	for _, set := range h.turns {
		for sub := range set {
			subs = append(subs, sub)
		}
	}
	h.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	began := time.Now()
	places, err := h.b.dialect.turnPlaces(ctx, subs)
	h.applyTurns(subs, places, err, began)
}

// applyTurns applies a poll's read of the places of subs, begun at began.
// A subscription whose waiter has an Enqueue or a Dequeue through this
// Backend under way, or ended after the read began, keeps the place that
// tells it: the read may be older or newer than that request's, and waking
// the waiter on the difference would wake it for nothing, twice (now, and
// at the next poll, which reads the place again). A leave the skipped read
// saw is seen by the next poll.
func (h *hub) applyTurns(subs []*subscription, places []int64, err error, began time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, sub := range subs {
		if _, ok := h.turns[sub.key][sub]; !ok {
			continue // closed meanwhile
		}
		if err != nil {
			sub.seen = seenUnknown
			sub.wake() // the waiter finds out for itself
			continue
		}
		if sub.telling > 0 || began.Before(sub.toldAt) {
			continue
		}
		if turnWakes(sub.seen, places[i]) {
			sub.wake()
		}
		sub.seen = places[i]
	}
}

// sawTurn records what an Enqueue (or a Dequeue) through this Backend told
// waiterID of its place, so that the poll wakes it only when that changes.
//
// Where the poll watches the lines, an Enqueue that found the entry ahead
// changed since the place recorded before (it left, or expired) also wakes
// the waiter, as the poll would have: the poll compares with the place
// recorded here, so it will not, and the Enqueue's caller may not read the
// place (package fencing's keeper renews the entry and looks only at the
// error). Under load that is the common case: a renewal waits for the file
// behind the Dequeue of the entry ahead, and the poll skips the place while
// the renewal is under way. A join (no place recorded before) wakes
// nothing.
func (h *hub) sawTurn(key, waiterID string, aheadSeq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	polls := h.b.listenDSN == "" // no listener: SQLite, MySQL, PostgreSQL without WithListener
	for sub := range h.turns[key] {
		if sub.waiterID == waiterID {
			if polls && sub.seen >= 0 && aheadSeq >= 0 && turnWakes(sub.seen, aheadSeq) {
				sub.wake()
			}
			sub.seen = aheadSeq
		}
	}
}

// telling marks an Enqueue or a Dequeue of waiterID under way, until the
// returned func is called, when it ends (see applyTurns).
func (h *hub) telling(key, waiterID string) (done func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.turns[key] {
		if sub.waiterID == waiterID {
			sub.telling++
		}
	}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		now := time.Now()
		for sub := range h.turns[key] {
			if sub.waiterID == waiterID && sub.telling > 0 {
				sub.telling--
				sub.toldAt = now
			}
		}
	}
}

// wakeTurn wakes the turn subscriptions of the waiter tagged tag on key.
func (h *hub) wakeTurn(key, tag string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.turns[key] {
		if sub.tag == tag {
			sub.wake()
		}
	}
}

// LineLength implements backend.LineReader: one read of the key's live
// entries, outside any transaction, on the server's clock (PostgreSQL,
// MySQL) or the host's (SQLite).
func (b *Backend) LineLength(ctx context.Context, key string) (int, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, err
	}
	return b.dialect.lineLength(ctx, key)
}
