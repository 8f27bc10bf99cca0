package fencing

import (
	"context"
	"fmt"

	"github.com/fencing-go/fencing/backend"
)

// KeyState is a key's state as the coordinator sees it: whether a lease is
// live, its token and expiry, and the highest token ever minted. It never
// holds the lease ID.
type KeyState = backend.KeyState

// KeyInfo is one key in a listing, with its state.
type KeyInfo = backend.KeyInfo

// Inspect returns key's state in one read, for operators, dashboards and the
// command-line tool. It needs a backend that implements backend.Inspector
// (all of this module's do); on others it returns an error wrapping
// errors.ErrUnsupported.
func (c *Coordinator) Inspect(ctx context.Context, key string) (KeyState, error) {
	i, ok := c.backend.(backend.Inspector)
	if !ok {
		return KeyState{}, opError("inspect", key, unsupported("backend.Inspector"))
	}
	sp := c.obs.begin(ctx)
	st, err := timedAttempt(c, ctx, func(ctx context.Context) (KeyState, error) { return i.Inspect(ctx, key) })
	c.obs.done(ctx, sp, opInspect, key, st.Token, err)
	if err != nil {
		return KeyState{}, opError("inspect", key, err)
	}
	return st, nil
}

// ForceRelease ends key's live lease whoever holds it: the operator's
// break-glass release, for a holder that is stuck but still renewing. The key
// is free at once, or, when the lease has a lock delay (WithLockDelay), once
// that delay has passed from now; the old holder's renewals fail with
// ErrLeaseNotFound, its token stops checking true, and the next grant gets a
// larger token. It
// reports whether a live lease was ended. It needs a backend that implements
// backend.ForceReleaser, or returns an error wrapping errors.ErrUnsupported.
func (c *Coordinator) ForceRelease(ctx context.Context, key string) (bool, error) {
	f, ok := c.backend.(backend.ForceReleaser)
	if !ok {
		return false, opError("force release", key, unsupported("backend.ForceReleaser"))
	}
	sp := c.obs.beginRelease(ctx, key)
	ended, err := timedAttempt(c, ctx, func(ctx context.Context) (bool, error) { return f.ForceRelease(ctx, key) })
	c.obs.forced(ctx, key, sp, ended, err)
	if err != nil {
		return false, opError("force release", key, err)
	}
	return ended, nil
}

// List returns one page of the keys that begin with prefix, with their
// states, starting at cursor ("" for the first page), and the next page's
// cursor ("" after the last). It needs a backend that implements
// backend.Lister, or returns an error wrapping errors.ErrUnsupported.
func (c *Coordinator) List(ctx context.Context, prefix, cursor string, limit int) ([]KeyInfo, string, error) {
	l, ok := c.backend.(backend.Lister)
	if !ok {
		return nil, "", fmt.Errorf("list: %w", unsupported("backend.Lister"))
	}
	sp := c.obs.begin(ctx)
	var next string
	page, err := timedAttempt(c, ctx, func(ctx context.Context) (page []KeyInfo, err error) {
		page, next, err = l.List(ctx, prefix, cursor, limit)
		return page, err
	})
	c.obs.done(ctx, sp, opList, prefix, 0, err)
	if err != nil {
		return nil, "", fmt.Errorf("list: %w", err)
	}
	return page, next, nil
}
