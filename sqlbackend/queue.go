package sqlbackend

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
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
	if err := b.ready(ctx); err != nil {
		return backend.Place{}, err
	}
	if err := backend.CheckEnqueue(key, waiterID, ttl); err != nil {
		return backend.Place{}, err
	}
	defer b.hub.telling(key, waiterID)()
	place := backend.Place{TTL: ttl}
	if b.dialect == Postgres {
		var aheadSeq, remainingMicros sql.NullInt64
		err := b.db.QueryRowContext(ctx, b.sql.enqueue, []byte(key), waiterID, int64(ttl)).Scan(&place.Ahead, &aheadSeq, &remainingMicros)
		if err != nil {
			return backend.Place{}, b.classify(ctx, "enqueue", err)
		}
		if place.Ahead > 0 {
			place.AheadRemaining = max(time.Duration(remainingMicros.Int64)*time.Microsecond, time.Microsecond)
		}
		b.hub.sawTurn(key, waiterID, aheadSeq.Int64)
		return place, nil
	}
	var aheadSeq int64
	err := b.rowTx(ctx, "enqueue", func(c querier, now hostNow) error {
		now, err := b.lockLine(ctx, c, key, now)
		if err != nil {
			return err
		}
		k, expires := []byte(key), now.since+int64(ttl)
		// A live entry is renewed in place; otherwise the key's expired
		// entries go (the waiter's own included) and it joins at the end.
		res, err := c.ExecContext(ctx, b.sql.renewEntry, k, waiterID, now.boot, now.since, expires)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if _, err := c.ExecContext(ctx, b.sql.dropExpired, k, waiterID, now.boot, now.since); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, b.sql.upsertEntry, k, waiterID, now.boot, now.since, expires); err != nil {
				return err
			}
		}
		var aheadExpires int64
		if err := c.QueryRowContext(ctx, b.sql.ahead, k, waiterID, now.boot, now.since).Scan(&place.Ahead, &aheadSeq, &aheadExpires); err != nil {
			return err
		}
		if place.Ahead > 0 {
			place.AheadRemaining = time.Duration(aheadExpires - now.since)
		}
		return nil
	})
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
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckWaiter(key, waiterID); err != nil {
		return err
	}
	defer b.hub.telling(key, waiterID)()
	if b.dialect == Postgres {
		var tag sql.NullString
		if err := b.db.QueryRowContext(ctx, b.sql.dequeue, []byte(key), waiterID).Scan(&tag); err != nil {
			return b.classify(ctx, "dequeue", err)
		}
		b.hub.sawTurn(key, waiterID, seenAbsent)
		if tag.Valid {
			b.hub.wakeTurn(key, tag.String)
		}
		return nil
	}
	next := ""
	err := b.rowTx(ctx, "dequeue", func(c querier, now hostNow) error {
		now, err := b.lockLine(ctx, c, key, now)
		if err != nil {
			return err
		}
		k := []byte(key)
		var seq int64
		err = c.QueryRowContext(ctx, b.sql.anyEntry, k, waiterID).Scan(&seq)
		if err == nil || errors.Is(err, sql.ErrNoRows) {
			if _, err := c.ExecContext(ctx, b.sql.dropExpired, k, waiterID, now.boot, now.since); err != nil {
				return err
			}
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil // not in the line
		}
		if err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, b.sql.removeEntry, k, waiterID); err != nil {
			return err
		}
		err = c.QueryRowContext(ctx, b.sql.behind, k, waiterID, now.boot, now.since, seq).Scan(&next)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	b.hub.sawTurn(key, waiterID, seenAbsent)
	if next != "" {
		b.hub.wakeTurn(key, turnTag(next))
	}
	return nil
}

// NotifyTurn implements backend.Queuer (see the top of this file). When it
// polls, it reads the waiter's place before it returns, so that a leave
// after NotifyTurn returns is told from that reading.
func (b *Backend) NotifyTurn(ctx context.Context, key, waiterID string) (backend.Subscription, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	if err := backend.CheckWaiter(key, waiterID); err != nil {
		return nil, err
	}
	sub := &subscription{h: &b.hub, key: key, freed: make(chan struct{}, 1), turn: true, waiterID: waiterID, tag: turnTag(waiterID), seen: seenUnknown}
	if b.dialect == SQLite || b.listenDSN == "" {
		if seen, err := b.turnPlaces(ctx, []*subscription{sub}); err == nil {
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

// turnPlaces reads, for each subscription, the seq of the live entry
// directly ahead of its waiter's (0 at the head, seenAbsent when its
// waiter's entry is not live).
func (b *Backend) turnPlaces(ctx context.Context, subs []*subscription) ([]int64, error) {
	out := make([]int64, len(subs))
	for i := range out {
		out[i] = seenAbsent
	}
	if b.dialect == Postgres {
		keys, ids := make([][]byte, len(subs)), make([]string, len(subs))
		for i, s := range subs {
			keys[i], ids[i] = []byte(s.key), s.waiterID
		}
		rows, err := b.db.QueryContext(ctx, b.sql.turn, keys, ids)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		type entry struct{ key, id string }
		ahead := make(map[entry]int64)
		for rows.Next() {
			var k []byte
			var id string
			var seq int64
			if err := rows.Scan(&k, &id, &seq); err != nil {
				return nil, err
			}
			ahead[entry{string(k), id}] = seq
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for i, s := range subs {
			if seq, ok := ahead[entry{s.key, s.waiterID}]; ok {
				out[i] = seq
			}
		}
		return out, nil
	}
	// SQLite: one read of each key's line, however many of its waiters
	// are subscribed.
	byKey := map[string][]int{}
	for i, s := range subs {
		byKey[s.key] = append(byKey[s.key], i)
	}
	for key, idx := range byKey {
		line, err := b.sqliteLine(ctx, key)
		if err != nil {
			return nil, err
		}
		for _, i := range idx {
			for j, e := range line {
				if e.id == subs[i].waiterID {
					out[i] = 0
					if j > 0 {
						out[i] = line[j-1].seq
					}
					break
				}
			}
		}
	}
	return out, nil
}

// lineEntry is an entry of a line, as the poll reads it.
type lineEntry struct {
	id  string
	seq int64
}

// sqliteLine reads key's live entries in their order, outside any
// transaction (a hint: the waiter's Enqueue decides).
func (b *Backend) sqliteLine(ctx context.Context, key string) ([]lineEntry, error) {
	now := hostNow{}
	if b.dialect == SQLite { // MySQL's statement reads the server's clock
		now = b.hostNow()
	}
	rows, err := mysqlArgs{b.db, &b.sql}.QueryContext(ctx, b.sql.turn, []byte(key), now.boot, now.since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var line []lineEntry
	for rows.Next() {
		var e lineEntry
		if err := rows.Scan(&e.id, &e.seq); err != nil {
			return nil, err
		}
		line = append(line, e)
	}
	return line, rows.Err()
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
	places, err := h.b.turnPlaces(ctx, subs)
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
	polls := h.b.dialect == SQLite || h.b.listenDSN == ""
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
	if err := b.ready(ctx); err != nil {
		return 0, err
	}
	if err := backend.CheckKey(key); err != nil {
		return 0, err
	}
	var n int
	var err error
	if b.dialect != SQLite {
		err = b.db.QueryRowContext(ctx, b.sql.lineLength, []byte(key)).Scan(&n)
	} else {
		now := b.hostNow()
		err = b.db.QueryRowContext(ctx, b.sql.lineLength, []byte(key), now.boot, now.since).Scan(&n)
	}
	if err != nil {
		return 0, b.classify(ctx, "line length", err)
	}
	return n, nil
}
