package etcdbackend

import "github.com/fencing-go/fencing/backend"

// Deletions returns how many deletions of its key the subscription s (from
// NotifyFree) has reported, not counting the wake-ups of a broken watch.
func Deletions(s backend.Subscription) int64 { return s.(*subscription).events.Load() }

// WithSweepHooks runs beforeTxn in each reclaiming pass before each Txn of
// marks and deletions it decided on from its read, with the number of keys
// the Txn deletes, and afterPass after each pass (either may be nil).
func WithSweepHooks(beforeTxn func(deletes int), afterPass func()) Option {
	return func(b *Backend) { b.sweep.hook, b.sweep.passed = beforeTxn, afterPass }
}

// Prefix returns b's prefix.
func Prefix(b *Backend) string { return b.prefix }
