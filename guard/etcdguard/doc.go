// Package etcdguard fences data kept in etcd: the fence check, the new fence
// and the caller's own operations are one etcd Txn, so they apply together
// or not at all.
//
// # Use
//
//	g := etcdguard.New(cli)
//	_, err := g.Write(ctx, "orders/42", lease.Token,
//		clientv3.OpPut("orders/42/total", "200"),
//		clientv3.OpPut("orders/42/updated-by", workerID))
//	if errors.Is(err, guard.ErrStaleToken) {
//		// a later holder has written (or fenced): stop, nothing was applied
//	}
//
// Admit is a Write without operations: the fence at takeover.
//
// # Records
//
// Each resource's fence is one etcd key, the prefix (default DefaultPrefix,
// apart from the lease records of etcdbackend under "fencing/") followed by
// the resource name's bytes, whose value is the token as 20 decimal digits,
// zero-padded ("00000000000000000042"). Fence keys have no etcd lease: a
// fence lives as long as its resource, and goes with it when the Txn that
// deletes the resource's keys holds the Guard's Drop (see "Dropping a
// fence" in docs/guards.md), never by time.
//
// The value is fixed-width so that etcd's Compare on a value, a byte
// comparison, orders fences as numbers: 20 digits hold every uint64, so
// the whole token range is supported. The alternative, encoding the token in
// a record's Version or ModRevision, would tie tokens to etcd's own counters
// and could not take a token from another coordinator; a padded value is
// one key, readable with etcdctl, and compared in the same Txn.
//
// # The Txn
//
// A Write of token t on fence key f is:
//
//	If(Version(f) = 0)                    -- no fence yet
//	Then(Put(f, t), ops...)
//	Else(Txn(If(Value(f) > t)             -- stale
//	         Then(Get(f))                 -- to name the fence in the error
//	         Else(Put(f, t), ops...)))
//
// (A Compare on the value of a missing key is false in etcd, hence the outer
// test.) When ops hold Drop(resource), a delete of f, it takes the place of
// Put(f, t): etcd refuses a Txn that writes one key twice. The caller's operations may be puts, deletes, gets and nested
// Txns; they run only when the token is admitted, and if any of them fails
// (a put WithIgnoreValue on a missing key, an unknown lease), etcd applies
// nothing of the Txn, so the fence does not move either. Operations that
// write under the fence prefix are refused with guard.ErrInvalidWrite.
//
// # Errors
//
// A Txn that times out may or may not have been applied, like any etcd
// write. Retrying it with the same token is safe as far as the fence goes
// (equal tokens are admitted); the caller's operations then run again.
package etcdguard
