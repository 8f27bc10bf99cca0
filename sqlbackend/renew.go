package sqlbackend

import (
	"context"
	"database/sql"

	"github.com/fencing-go/fencing/backend"
)

// Renew implements backend.Backend: one statement on PostgreSQL (the renew
// function), one BEGIN IMMEDIATE transaction on SQLite.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	defer b.driveSweep()
	if b.dialect == Postgres {
		var (
			outcome int
			token   sql.NullInt64
			expires sql.NullTime
		)
		err := b.db.QueryRowContext(ctx, b.sql.renew, []byte(req.Key), req.LeaseID, int64(req.Timeout), int64(req.Margin)).
			Scan(&outcome, &token, &expires)
		if err != nil {
			return backend.Lease{}, b.classify(ctx, "renew", err)
		}
		if outcome != outGranted {
			return backend.Lease{}, verdict(outcome)
		}
		return backend.Lease{Key: req.Key, LeaseID: req.LeaseID, Token: uint64(token.Int64), TTL: req.Timeout, Margin: req.Margin, ExpiresAt: expires.Time}, nil
	}
	var lease backend.Lease
	err := b.rowTx(ctx, "renew", func(c querier, now hostNow) error {
		r, found, now, err := b.lockRow(ctx, c, req.Key)
		if err != nil {
			return err
		}
		if !found || r.leaseID != req.LeaseID || r.released {
			return backend.ErrLeaseNotFound
		}
		if !r.live(now) {
			return backend.ErrLeaseExpired
		}
		r.expires, r.ttl, r.margin = now.since+int64(req.Timeout+req.Margin), int64(req.Timeout), int64(req.Margin)
		r.delayUntil = r.expires + r.lockDelay
		if err := b.writeRow(ctx, c, req.Key, r, true); err != nil {
			return err
		}
		lease = b.rowLease(req.Key, &r, now)
		return nil
	})
	return lease, err
}
