package backend

import (
	"errors"
	"fmt"
)

// The errors of a backend's constructor, the same for every backend (see
// "Constructors and the safety check" in the package documentation). A
// backend wraps them with its name and the detail, so errors.Is finds them
// whichever backend returned the error.
var (
	// ErrInvalidConfig: New got a nil client, a missing argument or an
	// option it cannot honour, and sent nothing to the store. A store
	// guard's New (sqlguard's) returns it too.
	ErrInvalidConfig = errors.New("invalid backend configuration")
	// ErrUnreachable: the safety check did not reach the store before New's
	// context ended or the connection failed (a wrong address, a server
	// that is down or is not the store, an etcd cluster with no leader).
	ErrUnreachable = errors.New("store unreachable")
	// ErrAuthRefused: the store refused the client's credentials.
	ErrAuthRefused = errors.New("store refused the credentials")
	// ErrPermissionDenied: the store refused the client's user something
	// the backend needs.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnsafeStore: the safety check found a store that can lose or
	// reissue a token it acknowledged (a setting that loses writes on a
	// restart, evicts records, or a replica that cannot take writes). The
	// backend's typed error names the setting and the fix.
	ErrUnsafeStore = errors.New("store may lose tokens")
	// ErrInvalidCursor: Lister.List got a cursor that no List of that
	// backend returned.
	ErrInvalidCursor = errors.New("invalid list cursor")
)

// CheckMode says what a backend's New does with its safety check. Every
// backend that has one takes it as WithSafetyCheck(mode).
type CheckMode int

// The safety check modes.
const (
	// CheckRefuse (the default) makes New fail when the check fails: an
	// unsafe store (ErrUnsafeStore), or one that it cannot reach
	// (ErrUnreachable) or that refuses the client (ErrAuthRefused,
	// ErrPermissionDenied). Tokens that go back defeat fencing silently,
	// so the default fails loudly.
	CheckRefuse CheckMode = iota
	// CheckWarn runs the check and logs what it finds (to the backend's
	// WithLogger, default slog.Default()) instead of failing, except a
	// refused login or permission, which no setting makes work. For
	// development against a throw-away store.
	CheckWarn
	// CheckSkip sends nothing: New does not talk to the store.
	CheckSkip
)

// String returns the mode's name.
func (m CheckMode) String() string {
	switch m {
	case CheckRefuse:
		return "CheckRefuse"
	case CheckWarn:
		return "CheckWarn"
	case CheckSkip:
		return "CheckSkip"
	}
	return fmt.Sprintf("CheckMode(%d)", int(m))
}

// Validate returns nil for a known mode and an error wrapping
// ErrInvalidConfig otherwise, for New to return.
func (m CheckMode) Validate() error {
	if m < CheckRefuse || m > CheckSkip {
		return fmt.Errorf("%w: unknown %v", ErrInvalidConfig, m)
	}
	return nil
}
