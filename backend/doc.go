// Package backend defines the interface that every fencing store implements and
// the records and errors it shares with package fencing.
//
// It plays the part that database/sql/driver plays for database/sql: a backend
// checks its arguments (CheckRequest, CheckRelease) and does the atomic work
// against its own clock (the coordinator's clock), and package fencing does
// defaults, lease IDs, resends and the user-facing types. Backends never
// import package fencing.
//
// # Contract
//
// For one key, the most recent lease is in exactly one of three states: live,
// expired (its time ran out on the coordinator's clock) or released. Backends
// keep these rules under any interleaving, retry or restart:
//
//   - Grant mints a token strictly larger than every token the key ever had,
//     only when no lease on the key is live; otherwise it fails with
//     ErrLeaseHeld and changes nothing. expiresAt = now + Timeout + Margin on
//     the coordinator's clock at processing time; the lease is live on
//     [grant, expiresAt).
//   - Grant is idempotent per lease ID: a Grant whose ID is the key's most
//     recent lease returns that lease unchanged while it is live (no new
//     token), ErrLeaseExpired once it expired and ErrLeaseNotFound once it was
//     released. This lets a caller retry a grant whose outcome it did not learn.
//   - Renew extends the live lease with that ID to now + Timeout + Margin,
//     keeping its token. The most recent lease's ID after expiry gets
//     ErrLeaseExpired; any other ID gets ErrLeaseNotFound. Neither changes
//     anything.
//   - Release ends the live lease with that ID at once. Releasing the most
//     recent lease again returns nil (so a resent release is harmless); an
//     expired one gets ErrLeaseExpired; any other ID gets ErrLeaseNotFound.
//   - Lock delay: a lease granted with Request.LockDelay d > 0 that ends
//     by expiry closes the key to grants on [expiresAt, expiresAt+d); one
//     ended by ForceRelease at t closes it on [t, t+d). A grant in that time
//     fails with a *HeldError whose Remaining is the delay's time left, and
//     changes nothing. A release by the holder leaves no delay. The lease is
//     not live during the delay: Token reports none, Renew gets
//     ErrLeaseExpired (after an expiry) or ErrLeaseNotFound (after a forced
//     release), as without a delay.
//   - Token reports the token of the key's live lease, or live == false and a
//     zero token when no lease is live.
//   - Bad input (see CheckRequest and CheckRelease) and a done
//     context get an error and change nothing.
//
// # Retention
//
// A backend may reclaim idle keys, so that a workload of a key per job
// holds a bounded store. Each backend takes WithRetention(d) (d <= 0:
// never reclaim) and documents its default and how soon after d it
// reclaims. A key is idle from when its last lease ended (a release, a
// forced release, an expiry) and any lock delay after it is over, until
// its next lease. Then:
//
//   - A key with a live lease, in a lock delay, or idle for less than d
//     keeps its lease record: every rule above holds for it as written.
//   - A key idle for d is reclaimed: the store then holds no lease record
//     of it (nor anything else the backend keeps per key for its leases),
//     within the bound the backend documents after d, driven by the
//     backend (a sweep, calls on other keys), never waiting for a call on
//     that key.
//   - A key's line (Queuer) holds no token and goes on the same terms,
//     apart from the lease record: once it has had no live entry for d,
//     or sooner (once it has no live entry and no subscription).
//   - Tokens never go back: a reclaimed key's next grant mints a token
//     above every token the key ever had, after any number of
//     reclamations, and when a reclamation races a grant on the key. The
//     backend keeps what it needs for this (a floor raised in the same
//     atomic step that deletes a record, or tokens from a store-wide
//     counter), never a write to one shared record on every grant. A
//     backend with dense tokens is dense only between reclamations: a
//     reclaimed key's tokens go on above the floor, not from its own.
//   - A reclaimed key answers as a key never leased: Token reports none;
//     Inspect the zero KeyState (MaxToken 0); List leaves it out; a Renew
//     or Release with one of its old lease IDs gets ErrLeaseNotFound (an
//     ID that is not the most recent lease's); a line has no entry of it.
//   - A Grant resent after its key was reclaimed may get a new lease
//     instead of its first answer (the same lease, ErrLeaseExpired,
//     ErrLeaseNotFound): reclamation can cost the same-answer guarantee,
//     never one live lease per key or tokens that only grow.
//
// Errors that mean "the request may or may not have taken effect" wrap
// ErrOutcomeUnknown, so a caller can retry with the same lease ID. A request
// that provably never reached the store (a refused dial, a closed client)
// must not wrap it: like database/sql/driver's ErrBadConn, the two are
// mirror images, and a caller acts on the difference.
//
// A verdict about the lease itself is returned as the sentinel alone, so
// every backend words the same situation alike: a refused grant as a
// *HeldError (which unwraps to ErrLeaseHeld), and ErrLeaseNotFound,
// ErrLeaseExpired and ErrTokenSpaceExhausted as they are. Backends never
// name the key in an error; package fencing names it once (see QuoteKey).
//
// Optional capabilities are small interfaces of their own, in
// capabilities.go, which package fencing finds by type assertion: Notifier
// (waiting for a key to come free), Inspector (a key's state), ForceReleaser
// (ending a lease without its ID), Lister (enumerating keys, whose bad
// cursor is ErrInvalidCursor), Queuer (a
// first-come, first-served line of waiters per key), LineReader (counting
// a key's line without joining it), MultiGranter (leases on several keys in
// one atomic step: GrantMany), Sizer (the records a store holds and the
// keys it reclaimed) and InProcess (a marker
// for a store whose requests never leave the process, sent without the
// Coordinator's request timeout). A backend whose store has no clock
// implements ObservedExpiry, which states the one rule it keeps
// differently: expiry, decided by observation.
//
// # Constructors and the safety check
//
// Every backend over a store outside the process is made the same way:
//
//	func New(ctx context.Context, client C, [required arguments,] opts ...Option) (*Backend, error)
//
// client is the store's own client (a *redis.Client, an etcd
// *clientv3.Client, a *sql.DB, a kubernetes.Interface), which stays the
// caller's: Close never closes it. Required arguments are the ones with no
// sensible default (sqlbackend's Dialect, kubebackend's namespace). ctx
// bounds everything New sends and nothing after it returns; New adds no
// timeout of its own, so give it a deadline (some clients, etcd's, wait
// for a connection for as long as the context allows).
//
// New first checks its arguments: a nil client, a missing argument or an
// option it cannot honour fails with an error wrapping ErrInvalidConfig,
// before anything is sent. Then it runs the backend's safety check: that
// the store is reachable, admits the client, and keeps what it
// acknowledges (so that no token is lost and reissued after a restart).
// What is checked is the backend's own (Redis: appendonly and the eviction
// policy; SQL: fsync, synchronous_commit, a standby, the SQLite journal;
// etcd: a linearizable read, which needs a leader; Kubernetes: a list of
// the namespace's Leases), and so are its typed errors, which name the
// setting and the fix; the sentinels are these, shared:
//
//   - ErrUnreachable: the store did not answer before ctx ended or the
//     connection failed;
//   - ErrAuthRefused, ErrPermissionDenied: the store refused the client;
//   - ErrUnsafeStore: the store can lose or reissue a token.
//
// Every such backend takes the option WithSafetyCheck(mode): CheckRefuse
// (the default) fails New, CheckWarn logs and goes on (a refused login
// still fails), CheckSkip sends nothing. A backend may refuse more later
// (sqlbackend's Grant re-checks the session on PostgreSQL) with the same
// sentinels.
//
// A backend whose store lives in the process (memorybackend) has nothing
// to reach and nothing to check: New(opts ...Option) *Backend. The same
// rule gives both shapes: a constructor takes a context when it can block
// and returns an error when it can fail, and that one can do neither (as
// bytes.NewBuffer, against net.Dialer.DialContext). An error it could
// never return would be a branch no caller can test.
//
// The conformance package holds a backend to this contract.
package backend
