package redisbackend

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// The line of waiters (backend.Queuer). Each key's line is two sorted sets
// in the key's hash slot (records.go): the waiter IDs by join sequence,
// and the same IDs by when their entry ends on the server's clock. Every
// decision is made inside one script against the server's TIME: each
// script first drops every entry whose time ran out, then does its work,
// so the line a script sees holds live entries only, in the order they
// joined. A waiter that leaves, by Dequeue or by running out of time,
// wakes the waiter directly behind it, and only that one, with a message
// on that waiter's own channel (NotifyTurn). Nothing in the line depends
// on a client's clock, and no entry needs anyone's help to leave: a dead
// waiter's entry is gone when its TTL ends, whether or not a script runs
// then (the next script drops it; the waiter behind it wakes by itself
// when its Place.AheadRemaining has passed, as Redis sends no event on
// expiry). docs/redis.md, "FIFO waiting", says why the line cannot stall
// or lose a waiter.
//
// The line is not waited for by WithMinReplicas: a failover that loses an
// entry costs its waiter its place (its next Enqueue puts it at the end),
// never a lease's safety.

// Enqueue implements backend.Queuer: one script drops the expired entries,
// puts waiterID at the end of the line (or renews its live entry in place)
// until now + ttl on the server's clock, and reads its place. ttl is
// rounded up to a microsecond. The line's keys expire with their last
// entry. A resend after an unknown outcome is safe: it renews the entry
// the first attempt made.
func (b *Backend) Enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, error) {
	if err := b.ready(ctx, backend.CheckEnqueue(key, waiterID, ttl)); err != nil {
		return backend.Place{}, err
	}
	ttl = ceil(ttl, time.Microsecond)
	reply, err := enqueueScript.runKeys(ctx, b.batch, b.lineKeys(key), b.lineArgs(key, waiterID, ttl.Microseconds())...).Slice()
	if err != nil {
		return backend.Place{}, sendError(ctx, "enqueue", err)
	}
	var n [2]int64
	if len(reply) != 2 {
		err = fmt.Errorf("%w: %d values, want 2", errBadReply, len(reply))
	} else {
		err = parseInts(n[:], reply)
	}
	if err != nil {
		// The script ran, but we cannot tell what it did.
		return backend.Place{}, fmt.Errorf("%w: redisbackend: enqueue: %w", backend.ErrOutcomeUnknown, err)
	}
	return backend.Place{Ahead: int(n[0]), AheadRemaining: time.Duration(n[1]) * time.Microsecond, TTL: ttl}, nil
}

// Dequeue implements backend.Queuer: one script drops the expired entries,
// removes waiterID's and publishes on the channel of the waiter that was
// directly behind it. A resend is safe.
func (b *Backend) Dequeue(ctx context.Context, key, waiterID string) error {
	if err := b.ready(ctx, backend.CheckWaiter(key, waiterID)); err != nil {
		return err
	}
	if err := dequeueScript.runKeys(ctx, b.batch, b.lineKeys(key), b.lineArgs(key, waiterID)...).Err(); err != nil {
		return sendError(ctx, "dequeue", err)
	}
	return nil
}

// NotifyTurn implements backend.Queuer on the waiter's own channel,
// <prefix>{<base64url(key)>}:turn:<hex sha1(waiterID)>, shared and
// re-established as NotifyFree's channels are (see NotifyFree). The line's
// scripts publish on it when the entry directly ahead of waiterID's
// leaves: by Dequeue, or by running out of time when a script drops it.
// An entry that runs out while no script runs publishes nothing until the
// next script; the waiter looks again when its Place.AheadRemaining has
// passed.
func (b *Backend) NotifyTurn(ctx context.Context, key, waiterID string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckWaiter(key, waiterID)); err != nil {
		return nil, err
	}
	return b.notifier.subscribe(ctx, b.turnChannel(key, waiterID))
}

// LineLength implements backend.LineReader: one read-only script counts
// the entries whose time has not run out on the server's clock.
func (b *Backend) LineLength(ctx context.Context, key string) (int, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, err
	}
	n, err := lineLengthScript.runKeys(ctx, b.batch, b.lineKeys(key)).Int()
	if err != nil {
		return 0, sendError(ctx, "line length", err)
	}
	return n, nil
}

// lineKeys returns the names of key's line and due times.
func (b *Backend) lineKeys(key string) []string {
	return []string{b.name(key, lineSuffix), b.name(key, dueSuffix)}
}

// lineArgs returns the arguments every line script takes (line.lua),
// followed by more.
func (b *Backend) lineArgs(key, waiterID string, more ...any) []any {
	return append([]any{waiterID, b.name(key, turnSuffix), b.publish}, more...)
}

// turnChannel returns the channel on which waiterID hears that its turn
// may have come. It carries the SHA1 of the ID, not the ID (a credential:
// channel names are public to PUBSUB CHANNELS); the scripts compute the
// same name with redis.sha1hex.
func (b *Backend) turnChannel(key, waiterID string) string {
	sum := sha1.Sum([]byte(waiterID))
	return b.name(key, turnSuffix) + hex.EncodeToString(sum[:])
}
