package sqlbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Release implements backend.Backend: one statement on PostgreSQL (an
// UPDATE of the live lease, see pgrow.go, or when that refuses the release
// function; both notify listening waiters when they commit), one BEGIN
// IMMEDIATE transaction on SQLite.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	defer b.driveSweep()
	if b.dialect == Postgres {
		if ok, err := b.releaseRow(ctx, key, leaseID); err != nil {
			return err
		} else if ok {
			b.hub.wakeKey(key)
			return nil
		}
		var outcome int
		if err := b.db.QueryRowContext(ctx, b.sql.release, []byte(key), leaseID).Scan(&outcome); err != nil {
			return b.classify(ctx, "release", err)
		}
		if outcome == outGranted {
			b.hub.wakeKey(key)
		}
		return verdict(outcome)
	}
	released := false
	err := b.rowTx(ctx, "release", func(c querier, now hostNow) error {
		r, found, now, err := b.lockRow(ctx, c, key)
		if err != nil {
			return err
		}
		switch {
		case !found || r.leaseID != leaseID:
			return backend.ErrLeaseNotFound
		case r.released:
			return nil // released already: a resent release is harmless
		case !r.live(now):
			return backend.ErrLeaseExpired
		}
		r.released, released = true, true
		r.expires = now.since // idle from now (retention.go)
		r.delayUntil = 0      // a clean end: no lock delay
		return b.writeRow(ctx, c, key, r, true)
	})
	if released && err == nil {
		b.hub.wakeKey(key)
	}
	return err
}

// ForceRelease implements backend.ForceReleaser. The old holder's release
// then returns nil (its lease reads as released) and leaves the lock delay
// running, its renewals and resent grants get backend.ErrLeaseNotFound.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx); err != nil {
		return false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return false, err
	}
	if b.dialect == Postgres {
		var ended bool
		if err := b.db.QueryRowContext(ctx, b.sql.forceRelease, []byte(key)).Scan(&ended); err != nil {
			return false, b.classify(ctx, "force release", err)
		}
		if ended {
			b.hub.wakeKey(key)
		}
		return ended, nil
	}
	var ended bool
	err := b.rowTx(ctx, "force release", func(c querier, now hostNow) error {
		r, found, now, err := b.lockRow(ctx, c, key)
		if err != nil || !found || !r.live(now) {
			return err
		}
		r.released, ended = true, true
		r.expires = now.since
		r.delayUntil = now.since + r.lockDelay // an unclean end: the delay runs from now
		return b.writeRow(ctx, c, key, r, true)
	})
	if ended && err == nil {
		b.hub.wakeKey(key)
	}
	return ended, err
}
