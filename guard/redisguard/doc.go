// Package redisguard fences data kept in Redis: one Lua script checks the
// fence, performs the caller's writes and raises the fence, so no other
// command runs in between.
//
// # Use
//
//	g := redisguard.New(client)
//	total := redisguard.Tag("orders/42") + ":total" // "{orders/42}:total"
//	err := g.Write(ctx, "orders/42", lease.Token,
//		redisguard.Set(total, 200),
//		redisguard.HSet(redisguard.Tag("orders/42")+":meta", "updated-by", workerID))
//	if errors.Is(err, guard.ErrStaleToken) {
//		// a later holder has written (or fenced): stop, nothing was written
//	}
//
// Write does SET, HSET and DEL. For anything else, NewScript wraps a Lua
// script of your own and Run runs it after the fence check, in the same
// script:
//
//	var addItem = redisguard.NewScript(`
//		redis.call('RPUSH', KEYS[1], ARGV[1])
//		return redis.call('LLEN', KEYS[1])`)
//	n, err := g.Run(ctx, "orders/42", lease.Token, addItem, []string{items}, item)
//
// Admit is a Write without operations: the fence at takeover.
//
// # Records
//
// A resource's fence is one string key, the prefix (default DefaultPrefix,
// apart from redisbackend's "fencing:" keys) followed by Tag(resource), the
// resource in braces, holding the token in decimal. It has no TTL: a fence
// lives as long as its resource, and goes with it when a Write that deletes
// the resource's keys carries the Guard's Drop (see "Dropping a fence" in
// docs/guards.md), never by time. Keep it out of reach of eviction policies
// that evict keys without a TTL (allkeys-*), as with redisbackend's keys.
//
// Tokens are compared in the script as decimal strings (by length, then
// digit by digit), never as Lua numbers: those are doubles, which cannot
// tell 2^53 from 2^53+1. So every uint64 token works.
//
// # Redis Cluster
//
// A script runs on one node, so the fence and every key a Write or Run
// touches must be in one hash slot. The fence key's hash tag is the
// resource: start each key you write with Tag(resource) ("{orders/42}:total")
// and it shares the fence's slot. On a *redis.ClusterClient the guard
// computes the slots before it sends anything and refuses a key in another
// slot with a *CrossSlotError (wrapping guard.ErrInvalidWrite). Keys under
// the fence prefix are refused on every client.
//
// # Failures and retries
//
// Write checks every operation before it applies the first, so a failing
// Write (an HSET on a key that holds a string) writes nothing and leaves the
// fence. A caller's script run by Run is the caller's: Redis does not undo
// what a script wrote before it failed, so the fence stays but those writes
// remain; check before you write.
//
// go-redis may resend a script after a network error, and a call that timed
// out may or may not have run. A resend with the same token is admitted
// (equal tokens are), so the writes happen again: make them idempotent (SET,
// HSET, DEL are) or keep retries off for guarded writes.
package redisguard
