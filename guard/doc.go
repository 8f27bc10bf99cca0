// Package guard is the resource side of fencing: it makes the store that a
// lease protects refuse writes from a holder whose lease has been taken
// over.
//
// A fencing token protects nothing until the resource checks it. The rule
// (Kleppmann's) is that the resource remembers the highest token it has
// admitted for each resource, its fence, and refuses a lower one in the same
// atomic step as the write. Asking the coordinator "is my token still
// current?" (fencing.Coordinator.CheckToken) and then writing is a race: the
// holder can stall between the answer and the write, its lease can expire
// and a new holder can write in that gap, and the stale write then lands on
// top. Only the store can close that gap, because only the store sees both
// writes in order.
//
// # Rules
//
// Every guard keeps a fence per resource, starting below every token, and
// for a write carrying token t:
//
//   - if t is lower than the fence, the write is refused with an error
//     wrapping ErrStaleToken and nothing of it is applied;
//   - otherwise the fence becomes t and the write is applied, both or
//     neither: a write that fails (a transaction that rolls back) leaves the
//     fence where it was.
//
// Equal tokens are admitted: one holder writes many times with its one
// token. A lower token is never admitted after a higher one.
//
// Token 0 is refused with ErrInvalidToken: no backend mints it (fencing
// tokens start at 1), so it can only be the token of a Lease that was never
// granted. A resource name is 1 to backend.MaxKeyLength bytes, any bytes,
// like a lease key; usually it is the lease key itself.
//
// # Fence at takeover
//
// A new holder can admit its token before its first write, with Admit and
// no write. From that moment the previous holder's writes are refused, even
// if the new holder has not written anything yet:
//
//	lease, err := coord.Grant(ctx, "orders/42", 10*time.Second)
//	...
//	if err := g.Admit(ctx, "orders/42", lease.Token); err != nil {
//		return err // a later holder has already fenced this one out
//	}
//	// ... prepare, then write through the guard with lease.Token
//
// # Tokens from the network
//
// A guard admits any token at least its fence, so one token that was never
// minted (a forged header, a buggy client) would raise the fence beyond
// every real holder's token for good. Tokens order writes; they do not
// authenticate them. A guard that takes tokens from the network gets a
// MintCheck (WithMintCheck on every guard and carrier): a token above the
// highest the lock store ever minted on the key is refused with
// ErrNotMinted, at the cost of one read of the lock store per new holder.
// A fence poisoned before is lowered by hand with the store guard's
// LowerFence, a compare-and-set that fails with ErrFenceChanged if the
// fence moved (see docs/guards.md).
//
// # Guards
//
// Memory (this package) keeps fences in process memory and runs the
// caller's write under the resource's lock. The store guards do the check
// and the write in the store's own atomic step:
//
//   - guard/etcdguard: one etcd Txn with the caller's clientv3.Ops;
//   - guard/redisguard: one Lua script that performs SET, HSET, DEL or the
//     caller's own script after the check;
//   - guard/sqlguard: one statement inside the caller's own database/sql
//     transaction (PostgreSQL, SQLite), committed or rolled back with the
//     caller's write.
//
// Memory, etcdguard and redisguard implement Guard. sqlguard's Admit takes
// the caller's transaction as well, since the fence must move in it, and
// its Takeover the *sql.DB, for the fence at takeover.
//
// # Dropping a fence
//
// A fence is the resource's own state: it lives as long as the resource and
// is never reclaimed by time, since a stalled holder can wake after any
// pause. Each store guard deletes a fence with its resource, in the same
// atomic step (Memory.Drop, sqlguard's Drop in the caller's transaction,
// redisguard's and etcdguard's Drop among a Write's operations); once it is
// gone, any token is admitted on that name again. docs/guards.md ("Dropping
// a fence") says when to drop a fence and when to keep it.
//
// # Across services
//
// When the holder calls another service that does the write, the token
// travels with the call: ContextWithToken puts it in a context (a
// fencing.Held's Context carries its own), guard/httpguard and
// guard/grpcguard carry it over HTTP and gRPC into the handler's context,
// and the handler passes TokenFromContext's token to its store guard with
// the write. A check before the handler is not atomic with the handler's
// write; see docs/across-services.md.
//
// The conformance package holds guards to these rules (conformance.RunGuard).
package guard
