package backend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Backend is a store that grants leases with fencing tokens.
//
// All methods are safe for concurrent use. Every method that talks to a store
// honours its context: a context that is already done returns the context's
// error (possibly wrapped) and changes nothing.
type Backend interface {
	// Grant takes a new lease on req.Key with the caller-chosen ID req.LeaseID.
	Grant(ctx context.Context, req Request) (Lease, error)
	// Renew extends the live lease req.LeaseID on req.Key from now.
	Renew(ctx context.Context, req Request) (Lease, error)
	// Release ends the live lease leaseID on key.
	Release(ctx context.Context, key, leaseID string) error
	// Token returns the token of the live lease on key, if there is one.
	Token(ctx context.Context, key string) (token uint64, live bool, err error)
	// Close releases the backend's own resources. It never closes a client
	// that the user passed in. Calls after Close return ErrClosed.
	Close() error
}

// Request is what Grant and Renew send to a backend.
type Request struct {
	// Key names the resource; 1 to MaxKeyLength bytes, any bytes.
	Key string
	// LeaseID is the holder's credential, chosen by the caller (package
	// fencing draws 130 random bits; see fencing.Lease.ID). It doubles as
	// the grant's request nonce.
	LeaseID string
	// Timeout is the lease's TTL: how long the holder may rely on it. (The
	// field keeps its first name; everywhere else this is the ttl.)
	Timeout time.Duration
	// Margin is the coordinator's extra safety buffer past Timeout, for
	// clock drift between holder and coordinator.
	Margin time.Duration
	// Owner is the holder's public label ("host-3/pid 4711", a leader's
	// address), empty for none; see CheckOwner. Grant stores it with the
	// lease in the same atomic step; Renew ignores it and keeps the owner
	// the grant stored. Inspector and Lister report it while the lease is
	// live, and never once it has ended. It is never a credential: anyone
	// who can inspect the key can read it.
	Owner string
	// LockDelay is how long the key stays closed to new grants after this
	// lease ends uncleanly, so that a holder that is still running (stalled,
	// cut off) has time to stop side effects no guard can fence: after an
	// expiry, no grant on the key succeeds until expiresAt + LockDelay;
	// after a forced release (ForceReleaser), until the moment of the
	// release + LockDelay; both on the coordinator's clock. A release by the
	// holder ends the lease with no delay. Zero means none; at most
	// MaxLockDelay (see CheckLockDelay). Grant stores it with the lease in
	// the same atomic step; Renew ignores it and keeps the grant's.
	LockDelay time.Duration
}

// Lease is a backend's record of a lease, as granted or renewed.
type Lease struct {
	Key     string
	LeaseID string
	// Token is the fencing token: larger than every earlier token on Key.
	Token uint64
	// TTL is the TTL actually granted, after any rounding up by the
	// backend (etcd grants whole seconds); TTL >= Request.Timeout.
	TTL time.Duration
	// Margin is the margin granted (as requested).
	Margin time.Duration
	// ExpiresAt is when the lease ends on the coordinator's clock, as the
	// backend reports it. Backends whose clock cannot be read report an
	// estimate and say so in their documentation.
	ExpiresAt time.Time
}

// Limits shared by every backend, so a key valid on one is valid on all.
const (
	// MaxKeyLength is the longest key, in bytes.
	MaxKeyLength = 1024
	// MaxLeaseIDLength is the longest lease ID a backend accepts; longer IDs
	// cannot be ours and get ErrLeaseNotFound without a round trip.
	MaxLeaseIDLength = 128
	// MaxOwnerLength is the longest owner (Request.Owner), in bytes.
	MaxOwnerLength = 256
	// MaxDuration is the longest Timeout + Margin. Longer leases are almost
	// certainly a bug, and the cap keeps every backend's arithmetic exact.
	MaxDuration = 366 * 24 * time.Hour
	// MinTimeout is the shortest TTL (Request.Timeout): a millisecond, the finest unit
	// every backend keeps a lease's time in (Redis counts milliseconds,
	// etcd rounds up to whole seconds). A shorter TTL is refused with
	// ErrInvalidTimeout rather than granted with a Deadline that has passed
	// before the answer arrives; it is most often a bare number where a
	// duration was meant (5 for 5s).
	MinTimeout = time.Millisecond
	// MaxLockDelay is the longest Request.LockDelay, as in Consul and
	// Chubby: long enough for a stalled holder to notice, short enough that
	// a crashed one does not close its key for long.
	MaxLockDelay = 60 * time.Second
)

// Sentinel errors. Package fencing re-exports them; test with errors.Is.
// Their text does not name the package (package fencing puts the operation
// and the key before it), nor do the guards' (ErrStaleToken is a guard's).
var (
	// ErrLeaseHeld: a live lease with another ID holds the key. A backend
	// knows that the lease is another one, not whose it is (it may be the
	// caller's own, lost), so the text names no holder.
	ErrLeaseHeld           = errors.New("key held by a live lease")
	ErrLeaseNotFound       = errors.New("lease not found")
	ErrLeaseExpired        = errors.New("lease expired")
	ErrInvalidKey          = errors.New("invalid key")
	ErrInvalidTimeout      = errors.New("invalid timeout")
	ErrInvalidMargin       = errors.New("invalid margin")
	ErrInvalidOwner        = errors.New("invalid owner")
	ErrInvalidLockDelay    = errors.New("invalid lock delay")
	ErrTokenSpaceExhausted = errors.New("token space exhausted")
	// ErrOutcomeUnknown marks an error after which the request may or may not
	// have taken effect (a lost response). Grant, Renew and Release may be
	// retried with the same lease ID to learn the outcome.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrClosed is returned by a backend after Close.
	ErrClosed = errors.New("backend closed")
)

// CheckKey returns an error wrapping ErrInvalidKey unless key is 1 to
// MaxKeyLength bytes long.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeyLength {
		return fmt.Errorf("%w: key is %d bytes, the maximum is %d", ErrInvalidKey, len(key), MaxKeyLength)
	}
	return nil
}

// CheckDurations returns an error wrapping ErrInvalidTimeout or
// ErrInvalidMargin unless ttl >= MinTimeout, margin >= 0 and ttl +
// margin is at most MaxDuration (which also rules out overflow).
func CheckDurations(ttl, margin time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: %v is not positive", ErrInvalidTimeout, ttl)
	}
	if ttl < MinTimeout {
		return fmt.Errorf("%w: %v is below the minimum %v", ErrInvalidTimeout, ttl, MinTimeout)
	}
	if margin < 0 {
		return fmt.Errorf("%w: %v is negative", ErrInvalidMargin, margin)
	}
	if ttl > MaxDuration || margin > MaxDuration-ttl {
		return fmt.Errorf("%w: ttl %v + margin %v exceeds the maximum %v", ErrInvalidTimeout, ttl, margin, MaxDuration)
	}
	return nil
}

// CheckLeaseID returns an error wrapping ErrLeaseNotFound for an ID that no
// backend could have stored: empty or longer than MaxLeaseIDLength.
func CheckLeaseID(id string) error {
	if id == "" || len(id) > MaxLeaseIDLength {
		return fmt.Errorf("%w: malformed lease ID", ErrLeaseNotFound)
	}
	return nil
}

// CheckRelease applies CheckKey and CheckLeaseID to a release's arguments.
func CheckRelease(key, leaseID string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return CheckLeaseID(leaseID)
}

// CheckOwner returns an error wrapping ErrInvalidOwner unless owner is at
// most MaxOwnerLength bytes of valid UTF-8 without control characters: a
// printable label that every store (a SQL text column too) keeps as it is
// and a terminal shows as it is. The empty owner means none.
func CheckOwner(owner string) error {
	if len(owner) > MaxOwnerLength {
		return fmt.Errorf("%w: owner is %d bytes, the maximum is %d", ErrInvalidOwner, len(owner), MaxOwnerLength)
	}
	if !utf8.ValidString(owner) {
		return fmt.Errorf("%w: owner is not valid UTF-8", ErrInvalidOwner)
	}
	if i := strings.IndexFunc(owner, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%w: owner has a control character at byte %d", ErrInvalidOwner, i)
	}
	return nil
}

// CheckLockDelay returns an error wrapping ErrInvalidLockDelay unless d is
// zero (no delay) or positive and at most MaxLockDelay.
func CheckLockDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: %v is negative", ErrInvalidLockDelay, d)
	}
	if d > MaxLockDelay {
		return fmt.Errorf("%w: %v exceeds the maximum %v", ErrInvalidLockDelay, d, MaxLockDelay)
	}
	return nil
}

// CheckWaiter applies CheckKey and CheckLeaseID to the key and waiter ID of
// a Queuer call: a waiter ID is a credential, drawn as a lease ID is.
func CheckWaiter(key, waiterID string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return CheckLeaseID(waiterID)
}

// CheckEnqueue applies CheckWaiter and CheckDurations(ttl, 0) to the
// arguments of Queuer.Enqueue.
func CheckEnqueue(key, waiterID string, ttl time.Duration) error {
	if err := CheckWaiter(key, waiterID); err != nil {
		return err
	}
	return CheckDurations(ttl, 0)
}

// CheckRequest applies CheckKey, CheckDurations, CheckLeaseID,
// CheckLockDelay and CheckOwner to req.
func CheckRequest(req Request) error {
	if err := CheckKey(req.Key); err != nil {
		return err
	}
	if err := CheckDurations(req.Timeout, req.Margin); err != nil {
		return err
	}
	if err := CheckLeaseID(req.LeaseID); err != nil {
		return err
	}
	if err := CheckLockDelay(req.LockDelay); err != nil {
		return err
	}
	if req.Owner == "" {
		return nil
	}
	return CheckOwner(req.Owner)
}

// MaxToken is the largest token a uint64 counter can mint. A backend with a
// smaller counter (Redis integers are signed 64-bit) documents its own.
const MaxToken = math.MaxUint64
