// Package redisbackend is a fencing backend on Redis: a standalone server, a
// Sentinel-managed primary (go-redis failover client) or a Redis Cluster.
//
// The Redis server's clock is the coordinator's clock. Grant, Renew,
// Release, Inspect, ForceRelease, Enqueue and Dequeue are each one Lua
// script in one round trip (EVALSHA, falling back to EVAL when the
// server's script cache lacks it); the script reads the server's TIME and
// decides expiry against it, so no time the client sends ever matters. Token on a *redis.Client is HMGET
// of the record then TIME, pipelined in one round trip, and asks the
// read-only token script only when that reply cannot decide (see Token); on
// other clients it is the script alone. List is SCAN, then the inspect
// script for the page's keys, pipelined.
//
// # Records
//
// Each key is one Redis hash named
//
//	<prefix>{<base64url(key)>}:token
//
// that holds the key's highest token, the most recent lease's ID, its expiry
// (server microseconds, or a mark that it was released) (records.go has the
// layout, lua/ the scripts). The hash has no TTL: it stays while the key is
// in use, about 200 bytes plus the key, and goes once the key has been idle
// for the retention (see Retention). The base64url encoding lets any byte string be a key, keeps
// braces and separators in the key from making two keys collide, and makes
// the hash tag non-empty, so on a Cluster everything about one key lives in
// one slot. A prefix that itself contains braces moves the hash tag into the
// prefix and pins all keys to one slot; avoid that unless you want it.
//
// # Retention
//
// A key idle (no live lease, no lock delay) for the retention on the
// server's clock is reclaimed: its record is deleted (WithRetention; 24
// hours by default, 0 keeps every record). Its line's keys expire by
// themselves when their last entry does. Its highest token must still
// outlive it, or a later grant could reissue it, so the script that
// deletes a record raises a floor in the same step: the highest token of
// any key reclaimed, one string key per prefix on a standalone server or a
// Sentinel's primary, one per hash slot on a Cluster (a script reaches
// one slot). A grant on a key with no record, never leased or reclaimed,
// reads the floor in its script and starts above it; no grant writes it.
// So tokens are dense on a key while its record is kept, and its first
// token after a reclaim is above the floor, which may be far above its own
// last one.
//
// Calls do the reclaiming: a Grant, Renew or Release that finds a pass due
// (retention/8 after the last one ended) starts one on a goroutine of its
// own, which SCANs the prefix's records and runs the reclaim script on
// each page, then ends; Close stops it. So a key is reclaimed within about
// retention/8 and one pass after its retention ends, by calls on any keys,
// and a backend that nobody calls keeps what it holds. A reclaimed key
// reads as never leased; a Renew or Release with one of its old lease IDs
// gets backend.ErrLeaseNotFound, and a grant resent with it a new lease.
// Size (backend.Sizer) counts the records by SCAN and the keys reclaimed.
// Every client of a prefix must read the floor: see docs/redis.md
// ("Retention") before upgrading from a version without it.
//
// # Tokens
//
// Tokens are dense per key while its record is kept (1, 2, 3...; a failed
// grant uses none up; see Retention) and are
// Redis integers, signed 64-bit: the largest is MaxToken (math.MaxInt64).
// Grant past it fails with backend.ErrTokenSpaceExhausted; tokens never
// wrap. A token passes through a Lua number (a double) only in the grant
// script and only below 2^53 - 1, where a double holds it and its successor
// exactly: there the script adds 1 in Lua and writes the number, which
// Redis stores as its integer digits. From 2^53 - 1 on, the script has
// Redis add (HINCRBY) and reads the token back as a string; every other
// script and Token return the stored string. So tokens stay exact over the
// whole range.
//
// # Durability
//
// Tokens only grow as far as Redis keeps its data. With appendonly yes and
// appendfsync always, an acknowledged grant survives kill -9 and power loss.
// With appendfsync everysec, a crash of the machine can lose about the last
// second or two of writes, and so can kill -9 while a slow disk makes Redis
// postpone its AOF writes. Without
// an append-only file (RDB snapshots only, or no persistence) a restart
// loses tokens and they go back. An allkeys-* eviction policy can evict a
// key's record or a floor at any time; volatile-* policies and noeviction
// never touch them, since they have no TTL. New checks this configuration (WithSafetyCheck).
//
// Replication is asynchronous: a failover can lose grants the old primary
// acknowledged. WithMinReplicas makes the primary wait for replicas after
// each grant and renewal, which narrows that window but is not consensus.
// See docs/redis.md for each setup's guarantees.
//
// # Errors and resends
//
// go-redis never resends this backend's scripts by itself, whatever the
// client's MaxRetries: each goes out once, so its error tells what happened
// to that one request. A request that provably never left (a refused or
// timed-out dial, a closed client, a pool without a free connection) and a
// request the server refused with an error reply changed nothing, and their
// errors do not wrap backend.ErrOutcomeUnknown. Every other failure (a lost
// connection, a read timeout) may have come after the server ran the
// script: the error wraps backend.ErrOutcomeUnknown with the cause, and the
// caller resends with the same lease ID (fencing.Coordinator does). The
// lease ID doubles as the request's nonce, so a resend is safe: a grant
// whose ID is the key's most recent lease returns that lease unchanged, a
// resent release of a released lease returns nil, and a resent renewal
// just renews again.
//
// A verdict about the lease is the sentinel alone (a *backend.HeldError,
// with the holder's time left on the server's clock, for a refused grant);
// no error names the key, which package fencing does once.
//
// # Waiting and inspecting
//
// The backend implements backend.Notifier (a release publishes on the
// key's channel, see NotifyFree), backend.Inspector, backend.ForceReleaser,
// backend.Lister and backend.Queuer. Expiry publishes nothing: records have
// no TTL, so Redis sees no event when a lease runs out; a waiter sleeps
// until the time a refused grant reported (backend.HeldError).
//
// # Lock delay
//
// A lease's lock delay (backend.Request.LockDelay) is a field of its
// record, and the grant script judges it by the server's clock, in the
// same step as its other checks: after an expiry the key is closed until
// the lease's end plus its delay; after a forced release, the record's end
// becomes a mark with the delay's end (records.go). A refused grant during
// a delay is a *backend.HeldError with Delayed set and the delay's time
// left.
//
// # FIFO waiting
//
// Each key's line of waiters (backend.Queuer) is two sorted sets in the
// key's slot, one by join sequence and one by when each entry ends on the
// server's clock. Enqueue and Dequeue are scripts that first drop every
// entry whose time ran out and then wake, on its own channel, only the
// waiter directly behind each entry that left (see queue.go, and
// docs/redis.md for why the line cannot deadlock or lose a waiter).
package redisbackend
