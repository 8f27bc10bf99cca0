// Package faultbackend wraps a backend for tests, so that a call can take
// effect in the store and then report what the caller would see of a
// fault at that moment: a lost reply (an error wrapping
// backend.ErrOutcomeUnknown), or its own context ending just as the answer
// arrives.
//
// The wrapper has every optional capability the package fencing uses
// (Notifier, Inspector, Lister, ForceReleaser, Queuer); each forwards to
// the wrapped backend, or returns errors.ErrUnsupported when that lacks it.
// Wrap a backend that has them all, such as the memory backend.
package faultbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Op names a call of the wrapped backend.
type Op string

// The calls an After hook sees.
const (
	Grant        Op = "grant"
	Renew        Op = "renew"
	Release      Op = "release"
	Enqueue      Op = "enqueue"
	Dequeue      Op = "dequeue"
	ForceRelease Op = "force-release"
)

// ErrLostReply is the error of a reply the test drops: the call took
// effect, and the caller cannot know. It wraps backend.ErrOutcomeUnknown.
var ErrLostReply = fmt.Errorf("reply lost (faultbackend): %w", backend.ErrOutcomeUnknown)

// Backend is a backend.Backend whose writes pass through After.
type Backend struct {
	backend.Backend
	after func(ctx context.Context, op Op, key string, err error) error
}

// New wraps b. after, called once each write (Grant, Renew, Release,
// Enqueue, Dequeue, ForceRelease) of b has returned err, returns the error
// the caller sees: err to pass the answer on, ErrLostReply to drop a
// reply. It runs in the caller's goroutine with the caller's context, so
// it may also end that context (a CancelFunc the test kept) to make the
// answer arrive as the context ends. after must be safe for concurrent
// use.
func New(b backend.Backend, after func(ctx context.Context, op Op, key string, err error) error) *Backend {
	return &Backend{Backend: b, after: after}
}

// Grant implements backend.Backend.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	l, err := b.Backend.Grant(ctx, req)
	return l, b.after(ctx, Grant, req.Key, err)
}

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	l, err := b.Backend.Renew(ctx, req)
	return l, b.after(ctx, Renew, req.Key, err)
}

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	return b.after(ctx, Release, key, b.Backend.Release(ctx, key, leaseID))
}

// NotifyFree implements backend.Notifier.
func (b *Backend) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	n, ok := b.Backend.(backend.Notifier)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return n.NotifyFree(ctx, key)
}

// Inspect implements backend.Inspector.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	i, ok := b.Backend.(backend.Inspector)
	if !ok {
		return backend.KeyState{}, errors.ErrUnsupported
	}
	return i.Inspect(ctx, key)
}

// List implements backend.Lister.
func (b *Backend) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	l, ok := b.Backend.(backend.Lister)
	if !ok {
		return nil, "", errors.ErrUnsupported
	}
	return l.List(ctx, prefix, cursor, limit)
}

// ForceRelease implements backend.ForceReleaser.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	f, ok := b.Backend.(backend.ForceReleaser)
	if !ok {
		return false, errors.ErrUnsupported
	}
	ended, err := f.ForceRelease(ctx, key)
	return ended, b.after(ctx, ForceRelease, key, err)
}

// Enqueue implements backend.Queuer.
func (b *Backend) Enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, error) {
	q, ok := b.Backend.(backend.Queuer)
	if !ok {
		return backend.Place{}, errors.ErrUnsupported
	}
	p, err := q.Enqueue(ctx, key, waiterID, ttl)
	return p, b.after(ctx, Enqueue, key, err)
}

// Dequeue implements backend.Queuer.
func (b *Backend) Dequeue(ctx context.Context, key, waiterID string) error {
	q, ok := b.Backend.(backend.Queuer)
	if !ok {
		return errors.ErrUnsupported
	}
	return b.after(ctx, Dequeue, key, q.Dequeue(ctx, key, waiterID))
}

// NotifyTurn implements backend.Queuer.
func (b *Backend) NotifyTurn(ctx context.Context, key, waiterID string) (backend.Subscription, error) {
	q, ok := b.Backend.(backend.Queuer)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return q.NotifyTurn(ctx, key, waiterID)
}
