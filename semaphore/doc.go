// Package semaphore limits how many holders act at once, over a
// fencing.Coordinator on any backend: a permit is a fenced lease on one of
// size slots, so each slot's tokens strictly increase and a resource guard
// (package guard) refuses the writes of a permit that has ended, slot by
// slot, exactly as for a lock.
//
// # Slots
//
// A semaphore named name with size n has the slot keys name+"/0" to
// name+"/"+(n-1) (decimal, no padding), ordinary keys of the Coordinator's
// backend: Inspect, List, the command-line tool and guards see them as
// they see any key. A permit's Held.Lease().Key names its slot.
//
// At most n permits are live at once across every process that uses the
// same name and size: each is a live lease on a distinct slot key, and the
// backend allows one live lease per key. Processes that disagree on the
// size share the slots they have in common: permits are limited by the
// largest size in use, and a process with a smaller size competes only for
// its own slots (it never takes a slot past its size). Holders lists every
// live slot under the name, so a slot at or past Size shows such a
// disagreement.
//
// # Waiting
//
// Acquire is fencing.Coordinator.LockAny over the slot keys: it waits as
// Lock does, without polling. It subscribes to every slot
// (Coordinator.NotifyFree) before its first attempt, tries a slot again
// the moment its release is announced, and otherwise when a refused grant
// said the slot's lease would end (backend.HeldError), with a fallback poll
// (WithPollInterval, or fencing.WithPollInterval per call) for a missed
// notification. The subscriptions cost per backend: memory, none beyond a
// map entry per slot; etcd, one watcher per slot on the client's one watch
// stream; Redis, one channel per slot on the backend's one pub/sub
// connection. On a backend that cannot notify, waiters poll.
//
// Waiters on one Coordinator take turns: only the first in line talks to
// the backend, the others wait in process, in FIFO order, so a release
// wakes one grant attempt per Coordinator (per process), not one per
// waiting goroutine. With fencing.WithFIFO each waiter instead waits in
// every slot's line in the store (backend.Queuer): permits go to waiters in
// the order their waits began, across processes, and a release wakes the
// waiter at the head of that slot's line; each waiter then keeps an entry
// in Size lines while it waits.
package semaphore
