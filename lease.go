package fencing

import (
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Lease is a granted lease. Hold on to it: ID is the credential that renews
// and releases it, and Token is what the protected resource checks.
type Lease struct {
	// Key is the leased key.
	Key string
	// ID is the holder's credential: 26 base32 characters carrying 130
	// bits from a ChaCha8 generator seeded with 256 bits from crypto/rand,
	// so it cannot be guessed from the key, the token, the time or other
	// IDs. It is ID, not LeaseID, because it is the Lease's own ID;
	// parameters and other types name a lease's ID LeaseID.
	ID string
	// Token is the fencing token: larger than every earlier token on Key.
	// Send it with every write to the protected resource.
	Token uint64
	// TTL is the TTL actually granted, after any rounding up by the
	// backend. It is at least the TTL asked for.
	TTL time.Duration
	// Margin is the coordinator's safety buffer past TTL.
	Margin time.Duration
	// ExpiresAt is when the lease ends on the coordinator's clock, as the
	// backend reports it. Do not compare it with the local clock to decide
	// whether to go on; use Deadline.
	ExpiresAt time.Time
	// Deadline is the local time (with a monotonic reading) by which the
	// holder must stop relying on the lease: the moment just before the
	// request was sent plus the TTL asked for, without the margin.
	// Go compares it by its monotonic reading (time.Until, Before, After);
	// its wall-clock reading, which only printing and Round(0) use, is
	// derived from a wall-clock reading at most a second older, so a step
	// of the wall clock within that second may not show in it.
	Deadline time.Time
}

// Remaining returns how long the holder may still rely on the lease by the
// local monotonic clock, or zero once Deadline has passed.
func (l Lease) Remaining() time.Duration {
	return max(time.Until(l.Deadline), 0)
}

// leaseOf is the Lease of the backend's record rec, with its Deadline.
func leaseOf(rec backend.Lease, deadline time.Time) Lease {
	return Lease{
		Key:       rec.Key,
		ID:        rec.LeaseID,
		Token:     rec.Token,
		TTL:       rec.TTL,
		Margin:    rec.Margin,
		ExpiresAt: rec.ExpiresAt,
		Deadline:  deadline,
	}
}
