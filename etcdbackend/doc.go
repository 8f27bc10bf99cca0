// Package etcdbackend is a fencing backend on etcd v3. The etcd cluster is
// the coordinator: its leader's lease timers decide expiry and its revision
// counter mints tokens; the client's clock decides nothing.
//
// Besides backend.Backend it implements the optional backend.Notifier (an
// etcd watch), backend.Inspector, backend.ForceReleaser, backend.Lister and
// backend.Queuer (a line of waiters ordered by revision, as etcd's
// concurrency.Mutex orders its waiters), and the lock delay
// (backend.Request.LockDelay).
//
// # Records
//
// Each user key k has up to four etcd keys under the prefix (default
// "fencing/"), and the entries of its line, named by the unpadded base64url
// encoding of k, which contains no '/', so no two user keys can share or
// split records whatever bytes they hold:
//
//	<prefix><base64url(k)>/d   the delay record: beside a live lease with a
//	                           lock delay, and alone during the delay; on an
//	                           etcd lease of its own
//	<prefix><base64url(k)>/i   the ID of the most recent lease (no etcd lease),
//	                           written only when a lease key is created
//	<prefix><base64url(k)>/l   the lease key: exists while a lease is live,
//	                           attached to an etcd lease no other key uses
//	<prefix><base64url(k)>/r   the ID of the most recent released lease
//	<prefix><base64url(k)>/s   the idle mark: when a sweep first saw the
//	                           key idle (see Retention)
//	<prefix><base64url(k)>/w/<base64url(waiter ID)>
//	                           a waiter's entry in the line, on an etcd lease
//	                           of its own
//
// The two lease-less records let the backend tell the holder of the most
// recent lease "expired" from "released" from "never held". They stay after
// the lease ends, about 2 × (key length + 60) bytes per key, until the
// key's retention has passed.
//
// # Retention
//
// Once a key has had no lease key, no delay record and no line entry for
// the retention (WithRetention; 24 hours by default, 0 keeps every record),
// a sweep deletes its records, and the key reads as one never leased: Token
// reports none, Inspect the zero KeyState, List leaves it out, a Renew or
// Release with one of its old lease IDs gets ErrLeaseNotFound, and a grant
// resent with one gets a new lease. Tokens need nothing more: each is the
// CreateRevision of a lease key, the cluster's revision, which no delete,
// compaction, restart or change of leader takes back, so a reclaimed key's
// next token is above every token it had.
//
// etcd keeps no time with a key and writes nothing when an etcd lease runs
// out, so the sweep marks when it first reads a key idle: it puts the key's
// idle mark (/s), the wall-clock time just after that read. A later pass
// that reads the key still idle, its mark newer than its ID and released
// records (every grant writes the one, every release the other, making an
// older mark stale), and the mark at least the retention old, deletes every
// etcd key of the key. Each write is a nested Txn, many keys to a Txn,
// guarded by one comparison over the key's whole range: no ModRevision in
// it above the revision of the pass's read, so a grant, release or enqueue
// since the read wins and that key's write does not happen. The mark is a
// wall-clock time so that a backend in any process, after any restart,
// can judge it; a clock off by s reclaims s early or late, which costs a
// resent request its same answer at most, never a rule about leases or
// tokens. A line entry that comes and goes without a grant between two
// passes writes neither record and does not postpone the reclaim.
//
// One goroutine per backend runs the passes, from New until Close: the
// first at a random time within the pass interval (at most a minute) of
// New, then retention/16 (at least 50ms) after the last one ended. Each
// pass reads the whole prefix, 1,024 etcd keys a page, and writes at most
// two Txns a page. So a key is reclaimed, without any call on it, between
// the retention and the retention + 2 × retention/16 + two passes after it
// became idle; backends of several processes on one prefix share the marks,
// and each deletion happens once. Size (backend.Sizer) counts the etcd keys
// under the prefix and the keys this backend reclaimed.
//
// # Lock delay
//
// etcd deletes the lease key when its etcd lease runs out, so a lock delay
// lives in the delay record, on an etcd lease of the lease's granted seconds
// plus the delay's, rounded up, taken after the lease key's and renewed with
// it (first, on the same keep-alive stream). A release by the holder deletes
// it in its Txn; an expiry leaves it to run out ceil(delay) seconds after
// the lease key; a forced release moves it, in its Txn, to a fresh etcd
// lease of the delay alone, renewed once after the Txn. Every grant's Txn
// requires that neither the lease key nor the delay record exists. The
// delay is thus whole seconds, at least the one asked for and at most a
// second longer (plus the leader's up to 500ms check, and etcd's minimum
// TTL after a forced release). A grant refused during it is a
// *backend.HeldError with Delayed, whose Remaining is the delay record's
// etcd lease's time to live plus one second (etcd reports whole seconds,
// rounded down): one more round trip, on refusal only. NotifyFree watches
// the delay record's deletion too, so a waiter wakes at the delay's end.
//
// # The line of waiters
//
// Entries are ordered by their etcd key's CreateRevision, which a renewal (a
// keep-alive of the entry's etcd lease) keeps; an entry whose waiter stopped
// renewing is deleted by etcd's revoke when its TTL (whole seconds) ends.
// Enqueue is a range read of the line and a keep-alive, or, for a waiter
// not in it, an etcd lease and one Txn that creates the entry and counts the
// line. Dequeue is one Txn. NotifyTurn watches only the entry directly
// ahead of the waiter's (at the head, its own), reading the line again
// after each event, so a handoff wakes only the waiter behind.
//
// # Tokens
//
// A lease's token is the CreateRevision of its lease key: the etcd revision
// of the transaction that created it (etcd's own documentation calls it a
// fencing token). Revisions are global to the cluster, strictly increase,
// survive restarts and are never reset by compaction, so each grant's token is
// larger than every earlier token on the key. Tokens are not dense: they skip
// by every write to the cluster in between, and they are shared by no two
// keys. A renewal that moves the lease key to a new etcd lease overwrites the
// key, which keeps its CreateRevision, so the token stays. The ID record is
// written in the same transaction as the lease key's creation and never
// again, so its ModRevision is the most recent token (KeyState.MaxToken).
//
// # Time
//
// etcd lease TTLs are whole seconds, the server raises a TTL below its minimum
// (ceil(1.5 × election timeout), 1s at the least) and refreshes every lease
// when a new leader takes over. So the backend asks for
// ceil(timeout + margin) seconds, and the TTL it reports in backend.Lease is
// the granted TTL minus the margin: never less than the timeout asked for, and
// a lower bound of the lease's real length. Lease.ExpiresAt is an estimate:
// the local time just before the request was sent plus the granted TTL. The
// leader's timer started later, so the real expiry is no earlier, up to clock
// rate differences.
//
// When a lease's TTL runs out, the leader revokes it (checking about every
// 500ms), and the revoke deletes the lease key. Until then the key still
// exists and etcd counts the lease as live: Token and Inspect report it live
// and no one else can be granted the key, but Renew rejects it with
// ErrLeaseExpired (etcd refuses to renew an expired lease) and changes
// nothing.
//
// # Round trips
//
// Grant costs two RPCs when the key is free: an etcd lease, then one Txn that
// creates the lease key only if it does not exist. The etcd lease is one
// that an earlier release of this backend freed, renewed by a keep-alive on
// a stream the backend keeps open (a keep-alive is not a raft proposal), or
// else a LeaseGrant. The Txns of Grant and Release carry no reads (each op
// of a Txn costs the server, whichever branch runs): a refused one (the key
// held, a resent request) reads the key's records afterwards as they were
// at the Txn's revision, one more RPC. When the key is held, the unused etcd
// lease goes back to the pool and the holder's time left is read for
// backend.HeldError (one more RPC). Should the etcd lease run out before the
// Txn arrives (a stall longer than its TTL), the Txn fails as a whole and
// Grant tries again with another, up to three times. Token is one
// linearizable read. Renew is a read and a keep-alive; a renewal that asks
// for a different number of seconds moves the key to a new etcd lease (four
// more RPCs). Release is one Txn guarded by the lease's identity (and the
// read when it is refused); it keeps the etcd lease it freed for a later
// grant of the same seconds (at most 64 are kept; beyond that, and on Close,
// they are revoked).
//
// # Reusing etcd leases
//
// An etcd lease is reused only when no key can be attached to it: after the
// Txn of this backend that deleted its only key succeeded (a release whose
// answer was lost never frees its etcd lease, and ForceRelease revokes it,
// as its holder may still be renewing it), or after a grant's Txn answered
// that it attached nothing. The pool hands each lease to one grant at a time,
// which renews it before the Txn; ExpiresAt counts from that keep-alive's
// send, as etcd's expiry clock restarts there. etcd never renews a lease
// whose TTL has run out, so an expired lease never comes back: the grant
// drops it and takes another. Tokens are the lease key's CreateRevision,
// whatever etcd lease it is attached to.
//
// One consequence: a Renew racing its own lease's Release (its read before
// the release, its keep-alive after) reports success, as if answered just
// before the release (as it could without reuse, between the release's Txn
// and its revoke), and the etcd lease it renews may by then carry another
// key, whose lease then lasts up to one TTL longer (never shorter).
//
// # Ambiguity
//
// A mutating request whose response is lost (a context ending mid-call, an
// unavailable or timed-out server, a connection cut) returns an error
// wrapping both backend.ErrOutcomeUnknown and the original error. The lease
// ID is stored in the records, so a Grant retried with the same ID returns
// the lease if the first one created it and grants it otherwise; retried
// Renews and Releases are equally safe. An etcd lease granted for a request
// whose outcome was lost is never reused and expires on its own after its
// TTL.
//
// A request that provably never left the client is not ambiguous: one that
// waited for a connection that never became ready (a refused dial, a server
// down, a handshake that never finished) until its context ended, or that
// was made on a closed client. The etcd client reports these with the same
// errors as a lost response (the context's error, codes.Canceled), so the
// backend asks gRPC instead: a call's grpc.Peer is filled only once the call
// got a stream on a connection, the step before its request is written.
// Once it has, any failure but a refusal by the server counts as ambiguous,
// including etcd's "no leader", "leader changed" and "request timed out"
// answers. This assumes the gRPC connection has no retry policy of its own
// in its service config (etcd's client sets none; gRPC's transparent
// retries resend only requests the server provably did not process).
//
// The backend therefore calls etcd's KV, Lease and Watch services on the
// client's connection itself, and does not go through wrappers a caller may
// have set on the client's KV, Lease or Watcher fields (such as
// clientv3/namespace); WithPrefix places its keys.
package etcdbackend
