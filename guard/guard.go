package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencing-go/fencing/backend"
)

// Guard admits fencing tokens for resources.
//
// Admit records token as the resource's fence (its high-water mark) if token
// is at least the current fence, and otherwise returns an error wrapping
// ErrStaleToken and changes nothing. Admitting the current fence again
// succeeds. An Admit with no write is how a new holder fences out the
// previous one before its first write; writes go through the store guard's
// own method, which admits and writes in one atomic step.
//
// Implementations are safe for concurrent use. A done context returns the
// context's error and changes nothing.
type Guard interface {
	Admit(ctx context.Context, resource string, token uint64) error
}

// Errors. Test with errors.Is. As the Coordinator's, their text does not
// name the package: the program that prints one adds its own name once.
var (
	// ErrStaleToken is returned for a write or Admit whose token is lower
	// than the fence: the highest token the resource has admitted. Nothing
	// of that write was applied. sqlbackend's AdmitTx returns it too.
	ErrStaleToken = errors.New("stale token")
	// ErrInvalidToken is returned for token 0 (never minted) and, by a
	// guard whose store cannot hold it, for a token out of the store's
	// range (see sqlguard.TokenRangeError). Nothing was changed.
	ErrInvalidToken = errors.New("invalid token")
	// ErrInvalidWrite is returned for a write the guard refuses to send:
	// one that touches the guard's own fence records, or one that could
	// not run in one atomic step (Redis Cluster keys in different slots).
	// Nothing was changed.
	ErrInvalidWrite = errors.New("invalid guarded write")
)

// CheckAdmit returns an error unless resource is a valid resource name (1 to
// backend.MaxKeyLength bytes, wrapping backend.ErrInvalidKey) and token is
// not 0 (wrapping ErrInvalidToken). Store guards call it before any I/O.
func CheckAdmit(resource string, token uint64) error {
	if err := backend.CheckKey(resource); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: token 0 is never minted (a Lease that was not granted?)", ErrInvalidToken)
	}
	return nil
}

// StaleError returns the error for token refused below fence on resource:
// a *StaleTokenError, which wraps ErrStaleToken and names the resource once.
func StaleError(resource string, token, fence uint64) error {
	return &StaleTokenError{Resource: resource, Token: token, Fence: fence}
}

// StaleTokenError is the error of a write or Admit refused because its token
// is below the resource's fence, when the guard knows the fence. It wraps
// ErrStaleToken: test with errors.Is, and use errors.As for the numbers (the
// carriers in guard/httpguard and guard/grpcguard send them back to the
// caller).
type StaleTokenError struct {
	Resource string
	Token    uint64 // the refused token
	Fence    uint64 // the resource's fence, the highest token it admitted
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("%v: token %d is below %d, the fence of resource %s", ErrStaleToken, e.Token, e.Fence, backend.QuoteKey(e.Resource))
}

// Unwrap returns ErrStaleToken.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }
