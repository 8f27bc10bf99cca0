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
// A key's record is never deleted: the highest token must outlive every lease
// on the key, or a later grant could reissue it. So a process that leases an
// unbounded number of distinct keys grows without bound; use a persistent
// backend for that, or keys from a bounded set. What stays is small: a key
// whose lease has ended holds its token, its state, a fingerprint of its last
// lease's ID and a copy of its bytes in a record with no pointers in it (the
// garbage collector does not trace it), plus an index slot: a few dozen
// bytes beyond the key's own bytes (docs/memory.md has the measured figure).
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
