// Package backend defines the interface that every fencing store implements and
// the records and errors it shares with package fencing.
//
// It plays the part that database/sql/driver plays for database/sql: a backend
// checks its arguments (CheckRequest, CheckRelease) and does the atomic work
// against its own clock (the coordinator's clock), and package fencing does
// defaults, lease IDs, resends and the user-facing types. Backends never
// import package fencing.
//
// # Contract
//
// For one key, the most recent lease is in exactly one of three states: live,
// expired (its time ran out on the coordinator's clock) or released. Backends
// keep these rules under any interleaving, retry or restart:
//
//   - Grant mints a token strictly larger than every token the key ever had,
//     only when no lease on the key is live; otherwise it fails with
//     ErrLeaseHeld and changes nothing. expiresAt = now + Timeout + Margin on
//     the coordinator's clock at processing time; the lease is live on
//     [grant, expiresAt).
//   - Grant is idempotent per lease ID: a Grant whose ID is the key's most
//     recent lease returns that lease unchanged while it is live (no new
//     token), ErrLeaseExpired once it expired and ErrLeaseNotFound once it was
//     released. This lets a caller retry a grant whose outcome it did not learn.
//   - Renew extends the live lease with that ID to now + Timeout + Margin,
//     keeping its token. The most recent lease's ID after expiry gets
//     ErrLeaseExpired; any other ID gets ErrLeaseNotFound. Neither changes
//     anything.
//   - Release ends the live lease with that ID at once. Releasing the most
//     recent lease again returns nil (so a resent release is harmless); an
//     expired one gets ErrLeaseExpired; any other ID gets ErrLeaseNotFound.
//   - Token reports the token of the key's live lease, or live == false and a
//     zero token when no lease is live.
//   - Bad input (see CheckRequest and CheckRelease) and a done
//     context get an error and change nothing.
//
// Errors that mean "the request may or may not have taken effect" wrap
// ErrOutcomeUnknown, so a caller can retry with the same lease ID. A request
// that provably never reached the store (a refused dial, a closed client)
// must not wrap it: like database/sql/driver's ErrBadConn, the two are
// mirror images, and a caller acts on the difference.
//
// A verdict about the lease itself is returned as the sentinel alone, so
// every backend words the same situation alike: a refused grant as a
// *HeldError (which unwraps to ErrLeaseHeld), and ErrLeaseNotFound,
// ErrLeaseExpired and ErrTokenSpaceExhausted as they are. Backends never
// name the key in an error; package fencing names it once (see QuoteKey).
//
// Optional capabilities are small interfaces of their own, in
// capabilities.go, which package fencing finds by type assertion: Notifier
// (waiting for a key to come free), Inspector (a key's state), ForceReleaser
// (ending a lease without its ID) and Lister (enumerating keys).
//
// The conformance package holds a backend to this contract.
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
	// Timeout is how long the holder may rely on the lease.
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
}

// Lease is a backend's record of a lease, as granted or renewed.
type Lease struct {
	Key     string
	LeaseID string
	// Token is the fencing token: larger than every earlier token on Key.
	Token uint64
	// TTL is the timeout actually granted, after any rounding up by the
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
	// MinTimeout is the shortest Timeout: a millisecond, the finest unit
	// every backend keeps a lease's time in (Redis counts milliseconds,
	// etcd rounds up to whole seconds). A shorter timeout is refused with
	// ErrInvalidTimeout rather than granted with a Deadline that has passed
	// before the answer arrives; it is most often a bare number where a
	// duration was meant (5 for 5s).
	MinTimeout = time.Millisecond
)

// Sentinel errors. Package fencing re-exports them; test with errors.Is.
// Their text does not name the package (package fencing puts the operation
// and the key before it); ErrStaleToken, a guard's, does, as the guards'
// own errors do.
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
	ErrTokenSpaceExhausted = errors.New("token space exhausted")
	// ErrOutcomeUnknown marks an error after which the request may or may not
	// have taken effect (a lost response). Grant, Renew and Release may be
	// retried with the same lease ID to learn the outcome.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrClosed is returned by a backend after Close.
	ErrClosed = errors.New("backend closed")
	// ErrStaleToken is returned by a resource-side guard for a write whose
	// token is lower than the highest one the resource has admitted.
	// Nothing of that write was applied.
	ErrStaleToken = errors.New("fencing: stale token")
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
// ErrInvalidMargin unless timeout >= MinTimeout, margin >= 0 and timeout +
// margin is at most MaxDuration (which also rules out overflow).
func CheckDurations(timeout, margin time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("%w: %v is not positive", ErrInvalidTimeout, timeout)
	}
	if timeout < MinTimeout {
		return fmt.Errorf("%w: %v is below the minimum %v", ErrInvalidTimeout, timeout, MinTimeout)
	}
	if margin < 0 {
		return fmt.Errorf("%w: %v is negative", ErrInvalidMargin, margin)
	}
	if timeout > MaxDuration || margin > MaxDuration-timeout {
		return fmt.Errorf("%w: timeout %v + margin %v exceeds the maximum %v", ErrInvalidTimeout, timeout, margin, MaxDuration)
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

// CheckRequest applies CheckKey, CheckDurations, CheckLeaseID and
// CheckOwner to req.
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
	if req.Owner == "" {
		return nil
	}
	return CheckOwner(req.Owner)
}

// MaxToken is the largest token a uint64 counter can mint. A backend with a
// smaller counter (Redis integers are signed 64-bit) documents its own.
const MaxToken = math.MaxUint64
