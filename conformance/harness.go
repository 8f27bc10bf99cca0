package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Harness tells the suite how to make backends of one kind and how time
// passes on their coordinator's clock.
type Harness interface {
	// NewBackend returns a backend over an empty key space (a fresh server,
	// or a fresh prefix on a shared one). The suite closes it; register any
	// further cleanup with t.Cleanup.
	NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error)
	// Wait lets d pass on the coordinator's clock: a fake clock advances at
	// once, a real server's harness sleeps. It must be safe for concurrent
	// use: a case whose waiters run on real time (LockManyOverlapping)
	// calls it from a goroutine of its own, so that a fake clock follows
	// real time while the waiters run.
	Wait(ctx context.Context, d time.Duration) error
	// Traits describes the backend's time and tokens to the suite.
	Traits() Traits
}

// Traits describes a backend to the suite, so the same cases hold a fake
// clock to the nanosecond and a real server to its own granularity.
type Traits struct {
	// Now reads the coordinator's clock exactly, when the harness can (a
	// fake clock). The suite then checks expiry at its exact boundary
	// (live at expiresAt-1ns, expired at expiresAt). When nil the suite
	// allows for real time passing and uses Slack.
	Now func() time.Time
	// MinTTL is the shortest timeout + margin the backend grants without
	// raising it (etcd's minimum lease TTL). Zero means no minimum. Expiry
	// cases on real servers use leases of this length, or a short default,
	// and lock delays of a whole number of it (etcd: whole seconds).
	MinTTL time.Duration
	// Slack is how long after a lease's TTL + margin has passed (counted
	// from just after the grant returned) the backend may still report the
	// lease live: rounding, a revoke loop, timer resolution. The suite waits
	// this much more before it requires a lease to have expired, and allows
	// it again at the end of a lock delay and in a refused grant's
	// HeldError.Remaining during one.
	Slack time.Duration
	// DenseTokens says tokens on a key go 1, 2, 3... and a failed grant uses
	// none up, while the backend keeps the key's record: a key with no
	// record (never leased, or reclaimed after the retention) starts above
	// the backend's floor (see "Retention" in package backend's doc). When
	// false the suite checks only that tokens strictly increase.
	DenseTokens bool
	// Retention is the retention of the backends the history checks see
	// (CheckHistory): a key idle that long may be reclaimed. Zero: the
	// checks allow no reclamation, which is right for a backend whose
	// retention outlasts the test (no case of the suite lets more than
	// eight hours pass on the coordinator's clock).
	Retention time.Duration
	// MaxToken is the largest token the backend mints; zero means
	// backend.MaxToken. The exhaustion case presets a key just below it
	// (see TokenPresetter).
	MaxToken uint64
}

// Sleep waits for d, or until ctx is done: the Wait of a harness whose
// coordinator is a real server, on which time passes by itself.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ManyHarness is implemented by a harness whose backends take several keys
// in one GrantMany (backend.MultiGranter) only when made for it: a Redis
// Cluster backend reaches several keys in one script only when its prefix
// puts them in one hash slot. The cases of GrantMany, HoldMany and
// LockMany use its backends; the other cases use NewBackend's.
type ManyHarness interface {
	// NewManyBackend is NewBackend for the cases of several keys.
	NewManyBackend(ctx context.Context, t testing.TB) (backend.Backend, error)
}
