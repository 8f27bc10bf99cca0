package natsbackend

import (
	"context"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Inspect reports key's state as this backend observes it, read from the
// stream's leader: ExpiresAt and DelayedUntil are estimates on the local
// clock (see the package documentation).
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return backend.KeyState{}, err
	}
	s, _, err := b.read(ctx, key)
	if err != nil {
		return backend.KeyState{}, err
	}
	return keyState(s), nil
}

func keyState(s status) backend.KeyState {
	ks := backend.KeyState{MaxToken: s.Token}
	now := time.Now()
	switch {
	case s.live:
		ks.Live, ks.Remaining, ks.ExpiresAt = true, s.remaining, now.Add(s.remaining)
		ks.Token, ks.Owner, ks.LockDelay = s.Token, s.Owner, s.delay()
	case s.delayed:
		ks.DelayRemaining, ks.DelayedUntil = s.remaining, now.Add(s.remaining)
	}
	return ks
}

// ForceRelease ends key's live lease, whoever holds it, by writing its
// record as released and forced in an update that names the revision it
// read. A lease with a lock delay leaves the key closed for that delay,
// from when each observer first sees the release.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return false, err
	}
	for {
		s, _, err := b.read(ctx, key)
		if err != nil || !s.live {
			return false, err
		}
		err = b.free(ctx, key, s, true)
		if conflict(err) {
			continue
		}
		return err == nil, err
	}
}
