package sqlbackend

import (
	"context"
	"database/sql"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Grant implements backend.Backend. On PostgreSQL it is one statement (an
// upsert that takes a free key, see pgrow.go; when it refuses, the grant
// function: the row locked, the server's clock read, the lock delay and
// the live lease judged, the counter raised); on SQLite one BEGIN
// IMMEDIATE transaction.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	defer b.driveSweep()
	if b.dialect == Postgres {
		return b.grantPG(ctx, req)
	}
	return b.grantSQLite(ctx, req)
}

func (b *Backend) grantPG(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if l, ok, err := b.grantRow(ctx, req); ok || err != nil {
		return l, err
	}
	return b.grantFunc(ctx, b.db, req)
}

// grantFunc runs the grant function for req on q (the pool, or a
// transaction of GrantMany's), which locks the key's row.
func (b *Backend) grantFunc(ctx context.Context, q querier, req backend.Request) (backend.Lease, error) {
	var (
		outcome          int
		token, ttl, marg sql.NullInt64
		expires          sql.NullTime
		remainingMicros  sql.NullInt64
	)
	err := q.QueryRowContext(ctx, b.sql.grant, []byte(req.Key), req.LeaseID, int64(req.Timeout), int64(req.Margin), req.Owner, int64(req.LockDelay)).
		Scan(&outcome, &token, &expires, &ttl, &marg, &remainingMicros)
	if err != nil {
		return backend.Lease{}, b.classify(ctx, "grant", err)
	}
	switch outcome {
	case outGranted, outSame:
		return backend.Lease{
			Key: req.Key, LeaseID: req.LeaseID, Token: uint64(token.Int64),
			TTL: time.Duration(ttl.Int64), Margin: time.Duration(marg.Int64), ExpiresAt: expires.Time,
		}, nil
	case outHeld, outDelayed:
		return backend.Lease{}, &backend.HeldError{
			Remaining: max(time.Duration(remainingMicros.Int64)*time.Microsecond, time.Microsecond),
			Delayed:   outcome == outDelayed,
		}
	}
	return backend.Lease{}, verdict(outcome)
}

// verdict returns the sentinel for a refusing outcome.
func verdict(outcome int) error {
	switch outcome {
	case outExpired:
		return backend.ErrLeaseExpired
	case outNotFound:
		return backend.ErrLeaseNotFound
	case outExhaust:
		return backend.ErrTokenSpaceExhausted
	}
	return nil
}

func (b *Backend) grantSQLite(ctx context.Context, req backend.Request) (backend.Lease, error) {
	var lease backend.Lease
	err := b.rowTx(ctx, "grant", func(c querier, now hostNow) (err error) {
		lease, err = b.grantInTx(ctx, c, req)
		return err
	})
	if err != nil {
		return backend.Lease{}, err
	}
	return lease, nil
}

// grantInTx grants req in a transaction of the row dialects (SQLite,
// MySQL) on c, judging by the coordinator's clock read with the row.
func (b *Backend) grantInTx(ctx context.Context, c querier, req backend.Request) (backend.Lease, error) {
	r, found, now, err := b.lockRow(ctx, c, req.Key)
	if err != nil {
		return backend.Lease{}, err
	}
	if found && r.leaseID == req.LeaseID { // a resend of the grant that made this lease
		switch {
		case r.released:
			return backend.Lease{}, backend.ErrLeaseNotFound
		case !r.live(now):
			return backend.Lease{}, backend.ErrLeaseExpired
		}
		return b.rowLease(req.Key, &r, now), nil
	}
	if found && r.live(now) {
		return backend.Lease{}, &backend.HeldError{Remaining: r.remaining(now) + time.Duration(r.lockDelay)}
	}
	if found && r.delayed(now) {
		return backend.Lease{}, &backend.HeldError{Remaining: r.delayRemaining(now), Delayed: true}
	}
	if !found { // a key never leased, or reclaimed: it starts from the floor
		if r.token, err = b.readFloor(ctx, c); err != nil {
			return backend.Lease{}, err
		}
	}
	if r.token >= MaxToken {
		return backend.Lease{}, backend.ErrTokenSpaceExhausted
	}
	r = leaseRow{
		token: r.token + 1, leaseID: req.LeaseID, boot: now.boot,
		expires: now.since + int64(req.Timeout+req.Margin), ttl: int64(req.Timeout), margin: int64(req.Margin),
		owner: req.Owner, lockDelay: int64(req.LockDelay),
	}
	r.delayUntil = r.expires + r.lockDelay
	if err := b.writeRow(ctx, c, req.Key, r, found); err != nil {
		return backend.Lease{}, err
	}
	return b.rowLease(req.Key, &r, now), nil
}

func (b *Backend) rowLease(key string, r *leaseRow, now hostNow) backend.Lease {
	return backend.Lease{
		Key: key, LeaseID: r.leaseID, Token: uint64(r.token),
		TTL: time.Duration(r.ttl), Margin: time.Duration(r.margin), ExpiresAt: r.expiresAt(now),
	}
}
