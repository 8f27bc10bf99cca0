// Package kubebackend is a fencing backend on Kubernetes: one
// coordination.k8s.io/v1 Lease per key, through client-go. It lives in its
// own Go module, so that a user of the other backends never has client-go
// in their module graph.
//
// Besides backend.Backend it implements backend.Notifier (a watch on the
// Lease), backend.Inspector, backend.ForceReleaser, backend.Lister,
// backend.Sizer, the lock delay and retention (WithRetention). It does not implement backend.Queuer: a line of waiters
// would be one more object written per waiter per renewal, and
// fencing.WithFIFO reports errors.ErrUnsupported.
//
// # Records
//
// A key's Lease is named by LeaseName: the key itself when it is a valid
// object name, a hash otherwise; the key is stored on it either way. Its
// spec is client-go's leader-election record (holderIdentity, the owner;
// leaseDurationSeconds; acquireTime; renewTime; leaseTransitions), so that
// kubectl get lease reads sensibly and a client-go LeaderElector on the same
// name respects a fencing lease, and the other way round. The token, the
// hash of the lease ID (never the ID: Leases are readable) and the
// durations are annotations under fencing-go.github.io/.
//
// # Tokens
//
// Every write is an update that carries the resourceVersion it read, so the
// API server applies it only to that state (compare-and-swap). A grant's
// token is the resourceVersion of the state it replaces, read as an
// integer (etcd's revision: the API server documents resourceVersions of
// one resource as comparable integers from 1.35 on). It is larger than every
// earlier token on the key, because each token was written into a state
// whose resourceVersion is larger than the token, and the grant replaces a
// state no older than that; and since etcd's revision is cluster-wide, a
// Lease deleted and created again (by an operator, or reclaimed: see
// Retention) starts above every resourceVersion the old one had. The stored token is kept too, and a
// grant mints at least one more than it (a Lease restored from a backup).
//
// # Time
//
// The API server never expires a Lease and has no clock to read, so expiry
// is observed: see backend.ObservedExpiry, which the backend implements.
// Each backend times every state of a Lease on its own monotonic clock from
// when it first saw it, and takes a key only after seeing its Lease
// unchanged for the lease's ttl + margin (a LeaderElector's Lease: its
// leaseDurationSeconds). ExpiresAt, KeyState.ExpiresAt and
// HeldError.Remaining are this backend's estimates; InspectObserved
// reports what it knows instead (how long it has seen the Lease
// unchanged, and for how long it must).
//
// By default the observations live in the process's memory: a process that
// has just started waits a whole ttl + margin from its first read before
// it takes an abandoned lease. WithObservationLog shares them between the
// processes of one host through an ObservationLog the caller provides (the
// fencing command keeps one in its state directory, on CLOCK_BOOTTIME), so
// that a grant retried by new processes gets an abandoned key one
// ttl + margin after the first of them saw it. The backend does no file I/O
// of its own.
//
// # Retention
//
// A key idle (no live lease, no lock delay) for the retention has its Lease
// deleted (WithRetention; 24 hours by default, 0 keeps every Lease). A
// goroutine per backend, ended by Close, runs a pass every retention/8 (at
// least 100 ms): it lists the backend's Leases (the managed label) a page
// at a time, judges each on the same observations and monotonic clock as a
// grant does, and deletes each one idle for the retention with a
// resourceVersion precondition, so a grant that wrote the Lease since wins.
// Idleness is observed like expiry: a released Lease is idle from when the
// backend first saw it released; a holder's lease that ran out, from its
// ttl + margin and lock delay after the state was first seen; a forced
// release, from its lock delay after that. A state another process wrote
// is first seen at the latest by the next pass, so a key is reclaimed
// within the retention plus retention/4 plus one pass after it became
// idle, by this backend's observation, while the API server answers.
//
// No floor is needed for tokens: a reclaimed key's next grant creates its
// Lease again, and the new Lease's resourceVersion, from etcd's revision,
// is above every resourceVersion (and so every token) the key ever had.
// A grant that read the Lease before the delete gets a conflict when it
// writes (its object carries the deleted Lease's UID, which the API server
// checks as a precondition), writes nothing, and reads again. A
// reclaimed key reads as never leased: Token reports none, Inspect the
// zero KeyState (MaxToken 0), List leaves it out, and its old lease IDs
// renew and release to backend.ErrLeaseNotFound. The backend also forgets
// its observations of Leases that are gone, so its memory is bounded too.
// Size (backend.Sizer) counts the namespace's labelled Leases with a List.
//
// # Outcomes
//
// An update whose answer was lost (a timeout, a reset connection, a 5xx
// answer) wraps backend.ErrOutcomeUnknown; the resend with the same lease ID
// reads the Lease and settles it: the lease ID's hash on the Lease says
// whether the grant landed.
//
// docs/kubernetes.md covers permissions (a Role), costs and the comparison
// with client-go's leader election.
package kubebackend
