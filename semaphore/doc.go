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
// Acquire waits without polling, as fencing.Coordinator.Lock does: it
// subscribes to every slot (Coordinator.NotifyFree) before its first
// attempt, tries a slot again the moment its release is announced, and
// otherwise when a refused grant said the slot's lease would end
// (backend.HeldError), with a fallback poll (WithPollInterval) for a missed
// notification. The subscriptions cost per backend: memory, none beyond a
// map entry per slot; etcd, one watcher per slot on the client's one watch
// stream; Redis, one channel per slot on the backend's one pub/sub
// connection. On a backend that cannot notify, waiters poll.
//
// Waiters of one Semaphore take turns: only the first in line talks to the
// backend, the others wait in process, in FIFO order, and the first hands
// its subscriptions and what it learned of each slot's expiry to the next.
// So a release wakes one grant attempt per Semaphore value (per process),
// not one per waiting goroutine. Separate Semaphore values (separate
// processes) on one name each send an attempt per announced release.
package semaphore
