// Package natsbackend is a fencing backend on a NATS JetStream key-value
// bucket, through nats.go's jetstream package: one entry per key. It lives
// in its own Go module, so that a user of the other backends never has the
// NATS client in their module graph.
//
// Besides backend.Backend it implements backend.Notifier (a KV watch on the
// key), backend.Inspector, backend.ForceReleaser and the lock delay. It
// does not implement backend.Queuer, backend.Lister, backend.MultiGranter
// or retention yet: no key is reclaimed (every key ever leased keeps its
// one entry; create the bucket with history 1).
//
// # Records
//
// A key's entry is under the KV key "l." and the key in unpadded
// base64url; its value is JSON: the hash of the most recent lease's ID
// (never the ID: the bucket is readable by whoever may read it), its
// token, whether it is held, its owner, ttl + margin, margin and lock delay
// in milliseconds, and whether a forced release ended it.
//
// # Tokens
//
// Every write is an update that names the revision it read (the stream's
// expected last sequence for the subject), so the stream stores it only
// over that state (compare-and-swap). A grant's token is the revision of
// the state it replaces: the bucket's revisions are the stream's sequence
// numbers, strictly increasing across every key of the bucket and kept by
// a purge, so the token is larger than every earlier token on the key
// (each was written into a state with a larger revision than itself). The
// stored token is kept too, and a grant mints at least one more than it.
//
// Deleting the bucket and creating it again starts its sequence from 1:
// tokens would go back. New therefore never creates the bucket, and an
// operator who recreates it must not (or must keep every guard's high-water
// mark: a guard refuses the lower tokens, so the failure is a refusal, not
// two writers). On an R3 bucket a stream leader change keeps the sequence
// (it is the replicated log's), so it changes no token.
//
// # Reads
//
// Every read that decides (a grant's, a renewal's, Token, Inspect) is the
// JetStream API's STREAM.MSG.GET for the key's subject, which the stream's
// leader answers after the writes it has applied: never KeyValue.Get,
// whose direct get (on a bucket with AllowDirect, the default) may be
// answered by a follower or a mirror that has not yet applied the latest
// write. A leader that was just deposed and does not know it yet may
// answer one stale read until it steps down (NATS's leader reads are not
// fenced by a quorum round), so a token check can pass for up to the
// server's election timeout after another grant; a grant itself is safe,
// since its write is a compare-and-swap that the new leader refuses.
//
// # Time
//
// A KV entry has no per-update TTL (a per-key TTL is set only by Create,
// and a bucket's MaxAge ties every lease to one TTL), and the server's
// clock cannot be read in a conditional write, so expiry is observed: see
// backend.ObservedExpiry, which the backend implements. Each backend times
// every state (revision) of an entry on its own monotonic clock from when
// it first saw it, and takes a key only after seeing its entry unchanged
// for the lease's ttl + margin. A renewal writes the entry again, so every
// observer starts again. ExpiresAt, KeyState.ExpiresAt and
// HeldError.Remaining are this backend's estimates. A process that has just
// started waits a whole ttl + margin from its first read before it takes an
// abandoned lease.
//
// # Safety
//
// New refuses a bucket that can lose an acknowledged write (see
// SafetyError): memory storage, one replica, a MaxAge, a mirror. Whether
// the servers sync every write (jetstream { sync_interval: always }) is
// not visible to a client; without it, a crash of a majority loses the
// last writes and tokens can go back. docs/nats.md says what to set.
//
// # Outcomes
//
// A write whose answer was lost (a timeout, the context ending, a
// reconnect) wraps backend.ErrOutcomeUnknown; the resend with the same
// lease ID reads the entry and settles it: the lease ID's hash in the
// entry says whether the grant landed.
package natsbackend
