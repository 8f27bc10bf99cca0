// Package conformance holds every fencing backend, ours or yours, to the same
// invariants, in the style of testing/fstest.TestFS and gocloud.dev's
// drivertest.
//
// # Running the suite against your backend
//
// Implement Harness for your backend and call Run from a test, and
// RunBenchmarks from a benchmark:
//
//	type harness struct{ /* a server address, a client... */ }
//
//	func (h *harness) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
//		return mybackend.New(client, mybackend.WithPrefix(uniquePrefix(t))) // an empty key space
//	}
//	func (h *harness) Wait(ctx context.Context, d time.Duration) error {
//		return conformance.Sleep(ctx, d) // a real server: let real time pass
//	}
//	func (h *harness) Traits() conformance.Traits {
//		return conformance.Traits{MinTTL: time.Second, Slack: 500 * time.Millisecond}
//	}
//
//	func TestConformance(t *testing.T)      { conformance.Run(t, &harness{}) }
//	func BenchmarkConformance(b *testing.B) { conformance.RunBenchmarks(b, &harness{}) }
//
// The suite drives the backend both through fencing.Coordinator (what users
// call) and directly through backend.Backend (what a Coordinator relies on:
// argument checks, idempotent retries). It checks:
//
//   - tokens per key strictly increase across release, expiry and re-grant and
//     are never reissued; keys have independent sequences; renewals keep the
//     token (and with Traits.DenseTokens, tokens go 1, 2, 3 with no gaps);
//   - of N goroutines racing to grant a free key, exactly one wins;
//   - expiry on the coordinator's clock at expiresAt = now + timeout + margin,
//     live on [grant, expiresAt), renewal from now without accumulating
//     margins;
//   - renew and release by foreign, stale, released and expired lease IDs get
//     the right error and change nothing;
//   - token checks pass only for the live lease's token;
//   - bad input and done contexts change nothing and get typed errors;
//   - odd keys (separators, braces, bytes) are distinct keys;
//   - a randomized concurrent history over a few keys (grants, renewals,
//     releases, checks, stale calls from older leases, resent grants, Lock,
//     LockAny and Hold, forced releases where the backend has them, with some
//     responses lost) is linearizable against a
//     sequential model of the lease contract, checked with porcupine (see
//     CheckHistory, which your own fault tests can call with a Recorder);
//     on a backend.MultiGranter, a second history mixes GrantMany and
//     LockMany over overlapping sets of keys in random orders with those
//     calls, and the checker holds each GrantMany to all keys at one moment
//     or none;
//   - expiry at its exact end, just before and just after, to the
//     backend's granularity; the last token minted once and then
//     ErrTokenSpaceExhausted (with a harness that implements
//     TokenPresetter); late renewals, releases and resent grants from
//     every older lease of a key (released, expired, forced out) change
//     nothing; keys that naive encodings merge (NFC and NFD forms,
//     separators, prefixes of each other) stay distinct;
//   - verdicts are the bare sentinels (a *backend.HeldError for a held key);
//   - the optional capabilities, when implemented: NotifyFree wakes on
//     release, Inspect reports state and the highest token, ForceRelease
//     ends any holder's lease, List pages through every key once; a
//     Queuer's line keeps join order (racing joins too), renewals keep a
//     place, an expired entry leaves it (and rejoins at the end),
//     AheadRemaining covers the entry ahead, a Dequeue wakes the waiter
//     behind and is idempotent, lines on different keys are independent;
//     a LineReader counts a line's live entries;
//   - a grant's owner is stored, reported by Inspect and List while the
//     lease is live, kept by renewals, gone after release; a bad owner
//     gets ErrInvalidOwner and changes nothing;
//   - a lease's lock delay (backend.Request.LockDelay): after an expiry,
//     and from a forced release, the key refuses grants with a
//     *backend.HeldError that is Delayed and tells the delay's time left,
//     to the nanosecond on a fake clock, while the token is not live, the
//     holder's renewals fail and Inspect shows DelayedUntil; then a grant
//     gets a larger token; a live lease's refusals count the delay in, and
//     Inspect and List show it, kept by renewals; a release by the holder
//     leaves no delay; MaxLockDelay is the cap, and a bad delay gets
//     ErrInvalidLockDelay and changes nothing; through package fencing,
//     Lock waits out a delay and gets the key soon after its end;
//   - Hold renews past the TTL and reports a rejected renewal as
//     ErrLeaseLost, and settles a grant whose answer was lost (Settled only
//     when its release came through); Lock wakes on release and expiry, hands the key to many
//     waiters one at a time in token order, and gives up with its context;
//     LockAny takes a free key of several, waits for whichever is released,
//     waits in every key's line with WithFIFO and leaves the others at its
//     grant, and never lets two waiters hold one key;
//     Do holds its lease while fn runs;
//   - Resume (ResumeAfterRestart): a new backend and Coordinator, as a
//     restarted holder makes them, take a saved live lease back with its
//     token and renew it; an expired lease gets ErrLeaseExpired, a
//     superseded one, a foreign ID and another key's ID ErrLeaseNotFound,
//     and none changes anything. A harness that implements Reopener makes
//     the new backend on the first one's key space (else the Observer's, or
//     a new Coordinator over the same backend).
//
// A backend whose store has no clock (backend.ObservedExpiry) is held to
// the observed-expiry rule instead: with a harness that implements
// Observer, a new observer refuses an abandoned lease until it has seen it
// unchanged for its ttl + margin, and then grants it with a larger token.
//
// A harness may also implement TokenPresetter, so the suite can reach the
// end of the token space, and Retainer, so the suite can check retention
// ("Retention" in package backend's doc): RetentionChurn churns many keys,
// waits past a short retention and drives the backend with calls on one
// other key until the store holds its live keys and that one, then checks
// that each reclaimed key reads as never leased and mints above its old
// tokens; RetentionRace checks a concurrent history with idle gaps longer
// than the retention against the model with reclamation
// (Traits.Retention). Without them those cases are skipped with a message
// that begins "harness capability:" (not a backend failure).
//
// # Crashing the server
//
// RunRestart kills a server of the test's own and starts it again (a
// Restarter says how), and checks what the crash must not lose: tokens, a
// lease live across it (resumed by a new backend and Coordinator), and the
// end of one that expired meanwhile.
// RunRestartWait, on a Restarter whose server comes back at the same
// address, checks that waiters (Lock, LockMany, Lock WithFIFO) wait
// through the crash and get their keys once the server is back, and that a
// wait that ends while it is down wraps the store's last error.
//
// # Stepping the server's clock
//
// RunClockStep steps the wall clock of a server of the test's own an hour
// forward and back mid-lease (a ClockStepper says how), and checks that no
// token is reissued, no ended lease comes back, and only the live lease's
// token is admitted (by the store's own check too, on a StoreAdmitter).
//
// # Checking your own histories
//
// Fault tests (a server killed, a network partitioned) can check what their
// clients saw with the same model: wrap each client's backend with a
// Recorder and pass its History to CheckLinearizable (or CheckHistory).
// Record every call that changes the keys you check.
//
// With a fake clock (Traits.Now set) the suite is exact and instant and runs
// its cases one after another. On a real server it waits in real time, with
// leases of at least Traits.MinTTL and Traits.Slack to spare, and runs its
// cases in parallel to keep the waiting short.
package conformance
