// Package rwlock is a fair read-write lock with fencing tokens, over a
// fencing.Coordinator on any backend: readers share the lock, a writer
// excludes readers and writers, and each holder is one or more fenced
// leases, renewed in the background as fencing.Held's are.
//
// # Keys
//
// The lock named name uses the key name itself, its turnstile, and the
// reader slots of a semaphore (package semaphore) named name+"/r": the keys
// name+"/r/0" to name+"/r/"+(n-1), n being WithReaders (DefaultReaders).
// They are ordinary keys of the backend: Inspect, List, the command-line
// tool and guards see them as they see any key.
//
// # How it works
//
// Every reader and writer first passes the turnstile, in line
// (fencing.Coordinator.Lock with fencing.WithFIFO): they pass one at a
// time, in the order their waits began.
//
//   - A reader, holding the turnstile, takes any one free reader slot
//     (semaphore.Semaphore.Acquire), then releases the turnstile and reads
//     under its slot's lease. Its Release releases the slot.
//   - A writer keeps the turnstile, and waits until every reader slot is
//     free by taking them all at once (fencing.Coordinator.LockMany). It
//     writes holding the turnstile and every slot; its Release releases
//     the slots, then the turnstile.
//
// Only a holder of the turnstile takes a slot, so a writer that holds it
// waits only for the readers already inside, and no reader enters until the
// writer leaves. At most n readers are inside at once; a reader that finds
// every slot taken waits for one, holding the turnstile.
//
// # Fairness
//
// The policy is first come, first served at the turnstile. A reader that
// arrives while a writer waits queues behind that writer, so a stream of
// readers arriving without pause cannot starve it: a writer gets in once
// the holders ahead of it in line have passed the turnstile and the
// readers inside have left (each reader leaves by its Release or its
// lease's end). A writer waits only for readers that passed the turnstile
// before it, and readers queued behind a writer enter together as soon as
// it leaves, so writers do not starve readers either. Readers never wait
// for each other except for a free slot, when n are inside.
//
// # Fencing tokens
//
// Every holder's token is the turnstile token it passed with: the key
// name's fencing token, which strictly increases in the order holders
// pass. So, for leases held until their holder's Release:
//
//   - A writer's token is above every earlier writer's and every earlier
//     reader's, and below every later holder's. A guard (package guard)
//     fences writes with it as with a lock's token: admit it, and a writer
//     whose lease ended is refused once a later writer wrote.
//   - A reader's token is above the token of every writer that passed
//     before it (whose hold ended before the reader's began) and below the
//     token of every writer that passes after it (whose hold begins after
//     the reader's ended). Readers inside at once have distinct tokens, all
//     between the same two writers' tokens.
//
// So a resource can fence a reader against the next writer: it admits a
// reader's action while the reader's token is at least the resource's
// fence (the highest token its writers admitted), and refuses it once a
// later writer's token is the fence. The reader's check must not raise the
// fence: a reader that admitted its token as a writer does (guard.Guard's
// Admit) would make the fence its own token and refuse the readers inside
// with lower tokens. With guard.Memory, a reader's read under the guard's
// fence is guard.Memory.Fence(resource) <= token. A writer whose lease
// ended before its writes did is fenced only once a later writer admits
// its token: readers that only check do not fence it.
//
// Context() carries the holder's token for the key name
// (guard.TokenFromContext), for the carriers in guard/httpguard and
// guard/grpcguard.
//
// # Failures
//
// A holder that dies or stops renewing blocks the others for at most its
// lease's time left (the ttl and margin as the backend counts them): a
// reader that dies in the turnstile or in a slot, or a writer that dies
// holding the turnstile and the slots, frees them by expiry, and a waiter
// that dies in the turnstile's line leaves it by its entry's expiry (see
// fencing.WithFIFO). A Reader's or Writer's Context ends when any of its
// leases ends. A reader or writer that loses the turnstile's lease while it
// waits for reader slots (its renewals not confirmed for a whole ttl) may
// have been overtaken in line: it releases what it took and waits in line
// again, so that tokens keep the order above.
//
// # Backends without a line
//
// On a backend that keeps no line of waiters (no backend.Queuer, such as
// kubebackend), the turnstile is taken without fencing.WithFIFO: readers
// and writers still exclude each other as above, and tokens mean the same,
// but the turnstile goes to whichever waiter's grant comes first, so a
// writer can be overtaken by readers that arrive after it.
package rwlock
