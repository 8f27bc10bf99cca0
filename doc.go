// Package fencing hands out leases on keys with fencing tokens.
//
// A lease says "you may act on this key until your Deadline". Each new lease
// on a key carries a token strictly larger than every token the key had
// before, so a resource that remembers the highest token it has seen can
// reject a writer whose lease quietly ran out (a GC pause, a slow network):
// that writer's token is stale.
//
// A Coordinator does defaults, lease IDs, resends and local deadlines; a
// backend.Backend (in memory, etcd, Redis, SQL on PostgreSQL, MySQL or
// MariaDB, or SQLite, Kubernetes Lease objects in kubebackend, a module of
// its own, a NATS JetStream key-value bucket in natsbackend, another, or
// your own) checks the arguments (backend.CheckRequest) and does the atomic
// work against the coordinator's clock, the only clock that decides expiry.
//
// # Time
//
// The backend ends a lease at expiresAt = now + ttl + margin on its own
// clock, at the moment it processes the request. The holder's promise to
// itself is Lease.Deadline = t_send + ttl on its monotonic clock, where
// t_send is read just before the request leaves. Network delay only moves
// the backend's expiry later than the holder's deadline, and the margin
// absorbs clock rate differences: a holder that stops by its Deadline never
// overlaps the next holder as long as the two clocks' rates differ by less
// than margin/ttl.
package fencing
