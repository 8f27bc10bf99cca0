package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencing-go/fencing/backend"
)

// Errors of the mint check (MintCheck) and of lowering a fence
// (LowerFence on each guard). Test with errors.Is.
var (
	// ErrNotMinted is returned for a token the lock store never minted:
	// above the highest token ever granted on the resource's key. Such a
	// token was forged or corrupted on its way; admitting it would raise
	// the fence above every token the store will mint for a long time and
	// lock every real holder out. Nothing was changed. See
	// *NotMintedError for the numbers.
	ErrNotMinted = errors.New("token never minted")
	// ErrMintUnchecked is returned when a token could not be checked
	// against the lock store (the store did not answer): the write is
	// refused, since the token may be forged, and nothing was changed. It
	// wraps the store's error. Retrying later may succeed.
	ErrMintUnchecked = errors.New("token not checked against the lock store")
	// ErrFenceChanged is returned by LowerFence when the fence is no
	// longer the value the operator saw (a holder admitted a token since):
	// nothing was changed. Read the fence again and decide again.
	ErrFenceChanged = errors.New("fence changed")
)

// NotMintedError is the error of a token refused by a MintCheck. It wraps
// ErrNotMinted.
type NotMintedError struct {
	Resource string
	Token    uint64 // the refused token
	Max      uint64 // the highest token the lock store has minted on the key; 0 for none
}

func (e *NotMintedError) Error() string {
	if e.Max == 0 {
		return fmt.Sprintf("%v: token %d for resource %s, whose key the lock store never granted", ErrNotMinted, e.Token, backend.QuoteKey(e.Resource))
	}
	return fmt.Sprintf("%v: token %d is above %d, the highest the lock store minted for resource %s", ErrNotMinted, e.Token, e.Max, backend.QuoteKey(e.Resource))
}

// Unwrap returns ErrNotMinted.
func (e *NotMintedError) Unwrap() error { return ErrNotMinted }

// MintCheck refuses tokens that the lock store never minted, so that a
// forged token (`Fencing-Token: 9223372036854775807`) cannot raise a fence
// beyond every real holder's reach. A guard given one (WithMintCheck on
// every guard and carrier) calls Check before it admits a token.
//
// The rule: a token must be at most the highest token the lock store has
// ever minted on the key named by the resource (backend.KeyState.MaxToken),
// so the resource name must be the lease key, as it usually is. A token
// above it is refused with a *NotMintedError. Tokens only grow and are never
// reissued, so a token once found minted stays minted: the check remembers,
// per resource, the highest MaxToken it has read, and reads the lock store
// (one Inspect) only for a token above that. A new holder's first write
// through a guard pays one read of the lock store; its later writes, and
// every write of earlier holders, pay nothing. A token that cannot be
// checked, because the store did not answer, is refused with an error
// wrapping ErrMintUnchecked.
//
// It keeps one number per key the lock store reported as leased, for as
// long as it lives (keys never leased are not kept, so forged resource
// names cost a read each and no memory). It is safe for concurrent use and
// may be shared by several guards.
type MintCheck struct {
	insp backend.Inspector
	mu   sync.Mutex
	max  map[string]uint64
}

// NewMintCheck returns a MintCheck that reads the lock store through insp:
// any backend (every one implements backend.Inspector) or a
// *fencing.Coordinator, whose Inspect adds its request timeout and retries.
func NewMintCheck(insp backend.Inspector) *MintCheck {
	return &MintCheck{insp: insp, max: make(map[string]uint64)}
}

// Check returns nil if token was minted on resource's key, an error
// wrapping ErrNotMinted if it was not, and one wrapping ErrMintUnchecked
// if the lock store could not be read. A nil *MintCheck admits every token.
func (m *MintCheck) Check(ctx context.Context, resource string, token uint64) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	known := m.max[resource]
	m.mu.Unlock()
	if token <= known {
		return nil
	}
	st, err := m.insp.Inspect(ctx, resource)
	if err != nil {
		return fmt.Errorf("%w: resource %s: %w", ErrMintUnchecked, backend.QuoteKey(resource), err)
	}
	if st.MaxToken > 0 {
		m.mu.Lock()
		if st.MaxToken > m.max[resource] {
			m.max[resource] = st.MaxToken
		}
		m.mu.Unlock()
	}
	if token > st.MaxToken {
		return &NotMintedError{Resource: resource, Token: token, Max: st.MaxToken}
	}
	return nil
}

// CheckLower returns an error unless lowering a fence from from to to is
// a lowering: to < from, and from is not 0 (no fence). to 0 clears the
// fence. Guards call it in LowerFence before any I/O.
func CheckLower(resource string, from, to uint64) error {
	if err := backend.CheckKey(resource); err != nil {
		return err
	}
	if from == 0 {
		return fmt.Errorf("%w: resource %s: fence 0 is no fence, nothing to lower", ErrInvalidToken, backend.QuoteKey(resource))
	}
	if to >= from {
		return fmt.Errorf("%w: resource %s: %d is not below the fence %d (a fence is raised by admitting a token, never by hand)", ErrInvalidToken, backend.QuoteKey(resource), to, from)
	}
	return nil
}

// FenceChangedError is the error of a LowerFence refused because the fence
// was no longer From. It wraps ErrFenceChanged.
type FenceChangedError struct {
	Resource string
	From     uint64 // the fence the caller expected
	Fence    uint64 // the fence found; 0 for none
}

func (e *FenceChangedError) Error() string {
	return fmt.Sprintf("%v: the fence of resource %s is %d, not %d: nothing was changed", ErrFenceChanged, backend.QuoteKey(e.Resource), e.Fence, e.From)
}

// Unwrap returns ErrFenceChanged.
func (e *FenceChangedError) Unwrap() error { return ErrFenceChanged }
