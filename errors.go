package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencing-go/fencing/backend"
)

// Errors returned by the Coordinator and every backend. Test them with
// errors.Is; they are the same values as the ones in package backend.
//
// Their text does not name the package: the Coordinator's errors begin with
// the operation and the key (grant "jobs/b": key held by a live lease), and
// a program that prints them adds its own name once.
var (
	// ErrLeaseHeld: a live lease on the key, other than the one the
	// request names, holds it (maybe one of the caller's own whose holder
	// gave up on it). The error is a *backend.HeldError, which tells how
	// long that lease has left when the backend knows.
	ErrLeaseHeld = backend.ErrLeaseHeld
	// ErrLeaseNotFound: the lease ID is not the key's current lease (foreign,
	// stale, superseded or released).
	ErrLeaseNotFound = backend.ErrLeaseNotFound
	// ErrLeaseExpired: the lease ID was the key's most recent lease, and its
	// time ran out on the coordinator's clock. Nothing was changed.
	ErrLeaseExpired = backend.ErrLeaseExpired
	// ErrInvalidTimeout: the TTL is below backend.MinTimeout (a
	// millisecond), or ttl+margin exceeds backend.MaxDuration.
	ErrInvalidTimeout = backend.ErrInvalidTimeout
	// ErrInvalidMargin: the margin is negative, or more than one was given.
	ErrInvalidMargin = backend.ErrInvalidMargin
	// ErrInvalidOwner: the owner (WithOwner, WithDefaultOwner) is longer
	// than backend.MaxOwnerLength bytes, not UTF-8, or has a control
	// character (see backend.CheckOwner).
	ErrInvalidOwner = backend.ErrInvalidOwner
	// ErrInvalidLockDelay: the lock delay (WithLockDelay,
	// WithDefaultLockDelay) is negative or over backend.MaxLockDelay.
	ErrInvalidLockDelay = backend.ErrInvalidLockDelay
	// ErrInvalidKey: the key is empty or longer than backend.MaxKeyLength.
	ErrInvalidKey = backend.ErrInvalidKey
	// ErrTokenSpaceExhausted: the key has used its last token. Tokens never
	// wrap around.
	ErrTokenSpaceExhausted = backend.ErrTokenSpaceExhausted
	// ErrOutcomeUnknown: the request may or may not have taken effect, and
	// retries within the context did not settle it. The error is an
	// *OutcomeError carrying the lease ID.
	ErrOutcomeUnknown = backend.ErrOutcomeUnknown

	// ErrLeaseLost: a held lease (Hold, Lock, Do) ended before its holder
	// released it: the coordinator rejected a renewal, the Deadline of the
	// last confirmed request passed without a newer confirmation, or the
	// maximum hold was reached (ErrMaxHold). The error wraps the reason too.
	ErrLeaseLost = errors.New("lease lost")
	// ErrMaxHold: a held lease ended because its maximum hold
	// (WithMaxHold) was reached. It is wrapped with ErrLeaseLost.
	ErrMaxHold = errors.New("maximum hold reached")
	// ErrInvalidOption: an option is nil or refuses its value (a renewal
	// interval not shorter than the TTL, a negative duration, a maximum hold
	// below backend.MinTimeout, a bad owner): a HoldOption's or LockOption's
	// at its call, a Coordinator Option's at every call that takes or renews
	// a lease (see Option).
	ErrInvalidOption = errors.New("invalid option")
	// ErrNoAnswer: the backend did not answer a request attempt within the
	// Coordinator's request timeout (WithRequestTimeout), a renewal of a
	// held lease before its Deadline, or a Lock's grant (unanswered for four
	// times the wait's slowest answer, at least 100ms, at most a second)
	// before its wait ended. The error also wraps the backend's
	// own, and ErrOutcomeUnknown when the request may have taken effect.
	ErrNoAnswer = errors.New("no answer")
)

// OutcomeError reports a request whose outcome stayed unknown: it may or may
// not have taken effect on the coordinator. It carries the lease ID so the
// caller can settle it: Release(ctx, e.Key, e.LeaseID) frees the key if the
// grant took effect, and Renew with that ID tells whether it did.
//
// Find it with errors.As; errors.Is(err, ErrOutcomeUnknown) also holds. Its
// message never shows the lease ID, which is a credential.
type OutcomeError struct {
	// Op is the request: "grant", "renew" or "release".
	Op string
	// Key is the request's key (of a request on several keys, the first).
	Key string
	// Keys is every key of a request on several keys (GrantMany, HoldMany,
	// LockMany), which share LeaseID; nil for a request on one key.
	Keys []string
	// LeaseID is the lease the request was for.
	LeaseID string
	// Settled is set by Hold, Lock and Do when they released the lease the
	// request may have taken: nothing is left for the caller to settle.
	Settled bool
	// Err is the last attempt's error; it wraps ErrOutcomeUnknown.
	Err error
}

func (e *OutcomeError) Error() string {
	label := backend.QuoteKey(e.Key)
	if len(e.Keys) > 0 {
		label = keysLabel(e.Keys)
	}
	msg := e.Op + " " + label + ": " + e.Err.Error()
	if e.Settled {
		msg += " (the lease it may have taken was released)"
	}
	return msg
}

// Unwrap returns Err.
func (e *OutcomeError) Unwrap() error { return e.Err }

// IsTransient reports whether err, the error of a request to the store,
// may pass by itself: the store unreachable for a while (a refused dial, a
// reset connection, a restart, a failover), a request it did not answer
// (ErrNoAnswer), or one whose outcome is unknown (ErrOutcomeUnknown). A
// waiter (Lock, LockMany, the recipes' waits) waits through such errors,
// and gives up only when its wait ends, with an error that wraps both the
// wait's end and the last of them.
//
// It is false for nil, for the end of a context (context.Canceled,
// context.DeadlineExceeded, unless the request timeout cut the attempt off:
// ErrNoAnswer), for the backend's verdicts on a lease (ErrLeaseHeld,
// ErrLeaseNotFound, ErrLeaseExpired), and for the errors no wait cures: an
// invalid key, TTL, margin, owner, lock delay or option, a closed backend
// (backend.ErrClosed), a capability the backend lacks
// (errors.ErrUnsupported), a store that refused the credentials or the
// permission (backend.ErrAuthRefused, backend.ErrPermissionDenied), a
// store that is misconfigured or unsafe (backend.ErrInvalidConfig,
// backend.ErrUnsafeStore), a key out of tokens. Any other error counts as
// transient: a store's errors are many, and a wait that waits through an
// unexpected one still ends with its context or WithWaitTimeout.
func IsTransient(err error) bool {
	if err == nil || definite(err) {
		return false
	}
	if errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrOutcomeUnknown) {
		return true
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// definite reports whether err is a verdict on the lease or an error that
// no wait cures (see IsTransient).
func definite(err error) bool {
	if isVerdict(err) {
		return true
	}
	for _, d := range definiteErrors {
		if errors.Is(err, d) {
			return true
		}
	}
	return false
}

// definiteErrors are the errors that end a wait at once (see IsTransient),
// besides the verdicts (isVerdict).
var definiteErrors = []error{
	ErrInvalidKey, ErrInvalidTimeout, ErrInvalidMargin, ErrInvalidOwner, ErrInvalidLockDelay, ErrInvalidOption,
	backend.ErrClosed, errors.ErrUnsupported, backend.ErrAuthRefused, backend.ErrPermissionDenied,
	backend.ErrInvalidConfig, backend.ErrUnsafeStore, backend.ErrInvalidCursor,
}

// isVerdict reports whether err is the backend's answer about the lease
// itself, which settles what an earlier attempt with the same ID did.
func isVerdict(err error) bool {
	for _, v := range []error{ErrLeaseHeld, ErrLeaseNotFound, ErrLeaseExpired, ErrTokenSpaceExhausted} {
		if errors.Is(err, v) {
			return true
		}
	}
	return false
}

// keysLabel names keys in a message: the first, shortened, and how many
// more.
func keysLabel(keys []string) string {
	switch len(keys) {
	case 0:
		return "no keys"
	case 1:
		return backend.QuoteKey(keys[0])
	}
	return backend.QuoteKey(keys[0]) + " and " + strconv.Itoa(len(keys)-1) + " more keys"
}

// unsupported is the error of a call that needs a capability of the
// backend, such as backend.Inspector, that it does not implement.
func unsupported(capability string) error {
	return fmt.Errorf("%w: the backend does not implement %s", errors.ErrUnsupported, capability)
}
