package backend

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Optional capabilities. A backend implements the ones its store can do;
// package fencing finds them by type assertion, as database/sql finds
// driver.Pinger, and falls back where it can (bounded polling instead of
// Notifier) or reports errors.ErrUnsupported where it cannot.

// Notifier is implemented by a backend that can wake a waiter when a key's
// lease ends, so that fencing.Coordinator.Lock need not poll.
type Notifier interface {
	// NotifyFree starts watching key for the end of its lease: a release, a
	// forced release and, where the store sees it, an expiry. It returns
	// once the watch is in place, so an end that happens after NotifyFree
	// returns is reported on the Subscription: a waiter subscribes first,
	// then tries to grant, then waits.
	//
	// Wake-ups may be spurious (a reconnect, another key's event) and are
	// coalesced; a waiter always tries the grant again to learn. When the
	// watch breaks, the backend sends a wake-up and re-establishes it, or
	// closes the channel so the waiter falls back to polling.
	//
	// ctx bounds only the setting up; Close ends the watch.
	NotifyFree(ctx context.Context, key string) (Subscription, error)
}

// Subscription is a watch set up by Notifier.NotifyFree.
type Subscription interface {
	// Freed receives a value (it has room for one; further ones are
	// dropped until it is read) each time the key's lease may have ended.
	// It is closed when the watch cannot go on.
	Freed() <-chan struct{}
	// Close ends the watch and frees everything it holds (connections,
	// goroutines). It is safe to call more than once.
	Close() error
}

// Inspector is implemented by a backend that can report a key's state in
// one round trip, for operators, waiters and the command-line tool.
type Inspector interface {
	// Inspect reads key's state linearizably, as Token does. It never
	// reveals the lease ID: KeyState has no field that could renew or
	// release the lease. A key never leased, or reclaimed after the
	// retention, has the zero KeyState.
	Inspect(ctx context.Context, key string) (KeyState, error)
}

// KeyState is a key's state as the coordinator sees it.
type KeyState struct {
	// Live says a lease on the key is live.
	Live bool
	// Token is the live lease's token; zero when no lease is live.
	Token uint64
	// MaxToken is the highest token ever minted on the key (the live one
	// or the last ended one); zero when the key was never leased, or its
	// record was reclaimed after the retention (see "Retention" in the
	// package doc): a reclaimed key's next token is still above every
	// token it had, which MaxToken no longer shows.
	MaxToken uint64
	// ExpiresAt is when the live lease ends on the coordinator's clock
	// (zero when none is live). Backends whose clock cannot be read report
	// an estimate, as for Lease.ExpiresAt.
	ExpiresAt time.Time
	// Remaining is how long the live lease had left on the coordinator's
	// clock when it was read; zero when none is live. Unlike ExpiresAt it
	// does not depend on the reader's clock agreeing with the coordinator's.
	Remaining time.Duration
	// Owner is the live lease's owner, as its grant stored it (see
	// Request.Owner); empty when none is live or the holder gave none.
	Owner string
	// LockDelay is the live lease's lock delay (Request.LockDelay): how
	// long the key will stay closed if that lease ends uncleanly. Zero when
	// none is live or its grant asked for none.
	LockDelay time.Duration
	// DelayedUntil is, while no lease is live and the key is in a lock
	// delay after an unclean end, when the delay ends on the coordinator's
	// clock (an estimate where that clock cannot be read, as for
	// ExpiresAt); zero otherwise. No grant on the key succeeds before then.
	DelayedUntil time.Time
	// DelayRemaining is how long that delay had left on the coordinator's
	// clock when it was read; zero when the key is not delayed.
	DelayRemaining time.Duration
}

// HeldError is the error a Grant returns when another lease on the key is
// live. errors.Is(err, ErrLeaseHeld) reports true for it; errors.As finds it
// for the time the holder's lease has left, which lets a waiter sleep until
// then instead of polling.
type HeldError struct {
	// Remaining is how long a grant on the key will stay refused unless the
	// holder releases first, on the coordinator's clock when the grant was
	// refused: the live lease's time left plus its lock delay
	// (Request.LockDelay), or, during a lock delay, the delay's time left.
	// Zero when the backend cannot tell (etcd does not report a lease's TTL
	// in the same request).
	Remaining time.Duration
	// Delayed reports that no lease is live and the key is in a lock delay
	// after an unclean end (see Request.LockDelay): nothing but time frees
	// it before Remaining has passed (no release can, and no notification
	// will come), so a waiter sleeps that long.
	Delayed bool
}

// Error returns ErrLeaseHeld's text, with the time left when known: the same
// wording on every backend.
func (e *HeldError) Error() string {
	if e.Delayed {
		if e.Remaining <= 0 {
			return ErrLeaseHeld.Error() + " (in a lock delay)"
		}
		return fmt.Sprintf("%v (in a lock delay for %v more)", ErrLeaseHeld, e.Remaining.Round(time.Millisecond))
	}
	if e.Remaining <= 0 {
		return ErrLeaseHeld.Error()
	}
	return fmt.Sprintf("%v (for %v more)", ErrLeaseHeld, e.Remaining.Round(time.Millisecond))
}

// Unwrap returns ErrLeaseHeld.
func (e *HeldError) Unwrap() error { return ErrLeaseHeld }

// maxKeyInMessage is how many bytes of a key an error message shows.
const maxKeyInMessage = 64

// QuoteKey returns key quoted for an error message, shortened to its first
// bytes and its length when it is long, so that a huge key never makes a
// huge message. Package fencing names the key once in each error; backends
// leave it out of theirs.
func QuoteKey(key string) string {
	if len(key) <= maxKeyInMessage {
		return strconv.Quote(key)
	}
	cut := maxKeyInMessage
	for cut > 0 && cut < len(key) && !isRuneStart(key[cut]) {
		cut-- // do not split a UTF-8 sequence
	}
	return strconv.Quote(key[:cut]) + "... (" + strconv.Itoa(len(key)) + " bytes)"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// ForceReleaser is implemented by a backend that can end a key's lease
// whoever holds it: the operator's break-glass release.
type ForceReleaser interface {
	// ForceRelease ends key's live lease at once, as if its holder had
	// released it: the old token stops checking true, the old holder's
	// renewals get ErrLeaseNotFound, and the next grant gets a larger token.
	// It is an unclean end: the key is free at once only when the lease had
	// no lock delay; otherwise no grant succeeds until now + its LockDelay
	// on the coordinator's clock. It reports whether a live lease was
	// ended; on a key with no live lease (a lock delay running included) it
	// changes nothing and reports false.
	ForceRelease(ctx context.Context, key string) (ended bool, err error)
}

// Lister is implemented by a backend that can enumerate its keys.
type Lister interface {
	// List returns the state of up to limit keys that begin with prefix,
	// starting at cursor ("" for the first page), and the cursor of the
	// next page ("" after the last). The order is the backend's own; every
	// key leased before the listing began and still stored appears exactly
	// once across the pages. A key reclaimed after the retention is not
	// stored, and is not listed. limit <= 0 means a backend's default page.
	// A cursor that no List of the backend returned may fail with an
	// error wrapping ErrInvalidCursor (a backend whose cursor is a key
	// takes any string).
	List(ctx context.Context, prefix, cursor string, limit int) (page []KeyInfo, next string, err error)
}

// KeyInfo is one key in a listing.
type KeyInfo struct {
	Key   string
	State KeyState
}

// InProcess is implemented by a backend whose requests never wait on a
// server or a network (an in-process store, such as memorybackend): package
// fencing sends them without its per-request timeout
// (fencing.WithRequestTimeout), which would cost more than the request. A
// backend that can block on anything outside the process must not
// implement it.
type InProcess interface {
	// InProcess is a marker; it does nothing.
	InProcess()
}

// Queuer is implemented by a backend that keeps, per key, a line of waiters
// in the order they joined: fencing.Coordinator.Lock with fencing.WithFIFO
// waits in it, and only the waiter at the head tries to grant. The line is
// advisory: Grant does not read it, so a grant made outside the line
// (Grant, Hold, Lock without WithFIFO) can still take a free key; the line
// orders the waiters that join it. A waiter that gets the key removes its
// entry at once; the waiter then at the head waits for that lease's release
// (Notifier, Inspector) and grants once, to a free key.
//
// An entry is leased like a lease: it lives for a TTL on the coordinator's
// clock and its waiter renews it. An entry whose waiter died, gave up
// without leaving or was cut off leaves the line when its TTL ends, so it
// delays the waiters behind it by at most that TTL.
type Queuer interface {
	// Enqueue puts waiterID at the end of key's line, with an entry that
	// lives for ttl from now on the coordinator's clock, or, when
	// waiterID's entry is in the line and live, renews it for ttl from now
	// and keeps its place. An entry that expired has left the line, and
	// Enqueue puts it at the end again. The Place is read in the same
	// atomic step. Its arguments follow CheckEnqueue (the waiter ID is a
	// credential, like a lease ID: package fencing draws it the same way).
	Enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (Place, error)
	// Dequeue removes waiterID's entry from key's line at once, so that
	// the waiter behind it goes next. Removing an entry that is not in the
	// line returns nil.
	Dequeue(ctx context.Context, key, waiterID string) error
	// NotifyTurn starts watching key's line for waiterID's sake: the
	// Subscription's Freed receives a value when an entry ahead of
	// waiterID's may have left (a Dequeue and, where the store sees it, an
	// expiry). It returns once the watch is in place; the waiter then
	// calls Enqueue to learn its place, so a leave just before the watch
	// began is not missed. Wake-ups may be spurious and are coalesced, as
	// for NotifyFree; a backend wakes only the waiter directly behind the
	// entry that left where its store can, so that a handoff does not
	// wake the whole line. ctx bounds only the setting up; Close ends the
	// watch.
	NotifyTurn(ctx context.Context, key, waiterID string) (Subscription, error)
}

// LineReader is implemented by a Queuer that can count the waiters in a
// key's line without joining it, for operators (the command-line tool's
// top).
type LineReader interface {
	// LineLength returns how many live entries key's line has now. It is
	// a read: it changes nothing, and drops no expired entry.
	LineLength(ctx context.Context, key string) (int, error)
}

// Place is a waiter's place in a key's line (Queuer.Enqueue).
type Place struct {
	// Ahead is how many live entries are ahead of the waiter's; zero means
	// it is at the head: its turn to grant.
	Ahead int
	// AheadRemaining is how long the entry directly ahead had left before
	// it expires, on the coordinator's clock, when Enqueue read it: a
	// waiter that hears nothing looks again then. Zero at the head, or when
	// the backend cannot tell.
	AheadRemaining time.Duration
	// TTL is the entry's TTL as granted, after any rounding up (etcd
	// grants whole seconds); TTL >= the ttl asked for.
	TTL time.Duration
}

// Sizer is implemented by a backend that can tell cheaply how many key
// records its store holds and how many it has reclaimed (see "Retention" in
// the package doc), for metrics and operators.
type Sizer interface {
	// Size reports the store's size now. It is a read: it changes nothing.
	Size(ctx context.Context) (StoreSize, error)
}

// StoreSize is what Sizer reports.
type StoreSize struct {
	// Records is how many keys the store holds a record of: keys with a
	// live lease, in a lock delay, or idle for less than the retention
	// (every key ever leased, when retention is off). Fixed records (a
	// floor) are not counted. A store shared by several backends (a
	// prefix each) counts the backend's own keys where it can, and says
	// so where it cannot.
	Records int64
	// Reclaimed is how many key records this backend has deleted since it
	// was made, after their retention: a count of this process's work,
	// for a counter metric; the backends of other processes sharing the
	// store count theirs.
	Reclaimed uint64
}

// ObservedExpiry is implemented by a backend whose store has no clock that
// can end a lease (the Kubernetes API server never expires a Lease). Such a
// backend keeps the contract in package doc with one rule changed, the
// expiry rule; every other rule (tokens, one live lease, idempotent resends,
// late renewals, token checks, bad input) holds as written:
//
//   - Each state of a key's record is timed on the backend's own monotonic
//     clock from when that backend first saw it: for its own writes, from
//     just before the write was sent; for a state another process wrote,
//     from the read that first returned it. A lease is live, for that
//     backend, until ttl + margin has passed since then, with no change to
//     the record meanwhile. A renewal changes the record, so every
//     observer starts again.
//   - A grant takes a key only when the backend has seen its record
//     unchanged for the lease's ttl + margin (and its lock delay, if any),
//     and writes only if the record is still the state it read (a
//     compare-and-swap), so a write the holder made meanwhile wins.
//   - So a backend that has just started, or another process, waits a whole
//     ttl + margin from its first read before it takes an abandoned lease;
//     and Inspect's ExpiresAt, HeldError.Remaining and the like are that
//     backend's estimates.
//
// The holder's promise to itself is unchanged (Deadline = send + ttl on its
// monotonic clock): its write landed after that send, and any observer saw
// it no earlier than it landed, so no observer takes the key before the
// holder's Deadline while clock rates differ by less than margin/ttl.
type ObservedExpiry interface {
	// ObservedExpiry is a marker; it does nothing.
	ObservedExpiry()
}
