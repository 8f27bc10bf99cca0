package etcdbackend

import "github.com/fencing-go/fencing/backend"

// Deletions returns how many deletions of its key the subscription s (from
// NotifyFree) has reported, not counting the wake-ups of a broken watch.
func Deletions(s backend.Subscription) int64 { return s.(*subscription).events.Load() }
