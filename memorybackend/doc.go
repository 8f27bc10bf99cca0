// Package memorybackend is an in-process fencing backend: the embedded default
// and the fast path. Its clock is injectable (WithClock, FakeClock), so tests
// of code that holds leases can move time by hand.
//
// State lives in shards chosen by a hash of the key, each with its own mutex,
// so operations on different keys rarely contend. Token checks do not
// allocate.
//
// # Memory
//
// A key whose lease has ended holds its token, its state, a fingerprint of
// its last lease's ID, when it became idle and a copy of its bytes in a
// record with no pointers in it (the garbage collector does not trace it),
// plus an index slot: a few dozen bytes beyond the key's own bytes
// (docs/memory.md has the measured figure).
//
// # Retention
//
// A key idle (no live lease, no lock delay) for the retention is reclaimed:
// its record is deleted (WithRetention; 24 hours by default, 0 keeps every
// record). Its highest token must still outlive it, or a later grant could
// reissue it, so the deletion raises the backend's floor, one number: the
// highest token of any key reclaimed. A key with no record, never leased or
// reclaimed, starts above the floor. So tokens are dense (1, 2, 3...) on a
// key while its record is kept, and its first token after a reclaim is
// above the floor, which may be far above its own last one.
//
// Grants do the reclaiming, with no goroutine: once a pass is due
// (retention/8 after the last one ended, on the backend's clock), each grant
// visits a bounded number of index slots of the backend's shards (64), one
// shard lock at a time after letting go of its own, until the pass has been
// round every shard. So a key is reclaimed within about retention/8 and one
// pass after its retention ends, by grants on any keys, and a backend that
// nobody calls keeps what it holds. Shards that have shrunk to less than
// half are compacted into new arrays, so the memory goes back to the heap.
// A Renew or Release with a reclaimed key's old lease ID gets
// backend.ErrLeaseNotFound; a grant resent with it gets a new lease.
// Size (backend.Sizer) reports the records held and the keys reclaimed.
// A live lease holds a further 72 bytes and keeps its lease ID and owner
// strings, until it is released, or until it has expired (and its lock delay,
// if it has one, is over) and the key is next touched or a later grant in its
// shard sweeps it.
//
// # Lock delay
//
// A lease with a lock delay (backend.Request.LockDelay) keeps its place
// among the live leases through the delay after it expires or is forced
// out, and its key refuses grants until then, to the nanosecond on the
// backend's clock; the keys whose leases ended cleanly pay nothing for it.
//
// The fingerprint is a 64-bit hash of the ended lease's ID, keyed by a seed
// drawn for each Backend. It answers a resent request with that ID as the
// contract says (a grant gets ErrLeaseNotFound after a release and
// ErrLeaseExpired after expiry, a release nil or ErrLeaseExpired). Another
// ID that hashes alike, one chance in 2^64 for a random ID, gets the same
// answers, so a collision can refuse a grant or excuse a release that
// changes nothing; it never grants a lease, extends one or reissues a token.
// A live lease's ID is compared in full.
//
// # Lines of waiters
//
// The backend implements backend.Queuer for fencing.WithFIFO: each key's
// line is a slice of entries in join order, apart from the lease shards,
// under one mutex of its own. A Dequeue wakes only the waiter directly
// behind the entry it removes. The clock is read, not run, so an entry that
// expires is removed (and the waiter behind it woken) when its line is next
// touched; a waiter that hears nothing looks again after its Place's
// AheadRemaining, as package fencing does. A line is forgotten once it has
// no entry and no subscription.
//
// State is lost when the process exits, so tokens restart at 1: this backend
// fences goroutines and tests within one process, not processes.
package memorybackend
