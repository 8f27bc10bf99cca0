package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Inspect implements backend.Inspector in one statement (PostgreSQL), on
// MySQL in mysqlReadRow's one or two, or on SQLite in one read of a live
// lease's row or else one transaction.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx); err != nil {
		return backend.KeyState{}, err
	}
	if err := backend.CheckKey(key); err != nil {
		return backend.KeyState{}, err
	}
	if b.dialect == Postgres {
		info, err := scanPG(b.db.QueryRowContext(ctx, b.sql.inspect, []byte(key)))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return backend.KeyState{}, nil
		case err != nil:
			return backend.KeyState{}, b.classify(ctx, "inspect", err)
		}
		return info.State, nil
	}
	if b.dialect == MySQL {
		r, found, now, err := b.mysqlReadRow(ctx, key)
		if err != nil {
			return backend.KeyState{}, b.classify(ctx, "inspect", err)
		}
		if !found {
			return backend.KeyState{}, nil
		}
		return r.state(now), nil
	}
	// A live lease is read without the write lock: the row is read first
	// (WAL: a snapshot, never waiting for a writer), the clock after it.
	// A lease live at that later clock reading was live when the row was
	// read, since its end only moves later; so the answer is the state at
	// the read. Anything else (no lease live, a read that failed) is asked
	// again in a transaction that holds the write lock, as Redis's
	// pipelined token check falls back to its script.
	r, found, now, err := b.readRow(ctx, b.db, key)
	if err == nil && found && r.live(now) {
		return r.state(now), nil
	}
	var st backend.KeyState
	err = b.rowTx(ctx, "inspect", func(c querier, now hostNow) error {
		r, found, now, err := b.lockRow(ctx, c, key)
		if found {
			st = r.state(now)
		}
		return err
	})
	return st, err
}

// state is the row's KeyState at now.
func (r *leaseRow) state(now hostNow) backend.KeyState {
	st := backend.KeyState{MaxToken: uint64(r.token)}
	switch {
	case r.live(now):
		st.Live, st.Token, st.ExpiresAt, st.Remaining = true, uint64(r.token), r.expiresAt(now), r.remaining(now)
		st.Owner, st.LockDelay = r.owner, time.Duration(r.lockDelay)
	case r.delayed(now):
		st.DelayRemaining = r.delayRemaining(now)
		st.DelayedUntil = now.wall.Add(st.DelayRemaining)
	}
	return st
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanPG reads one row of the inspect and list queries.
func scanPG(s scanner) (backend.KeyInfo, error) {
	var (
		key                   []byte
		token, lockDelay      int64
		live                  bool
		expires, delayedUntil sql.NullTime
		micros, delayMicros   sql.NullInt64
		owner                 string
	)
	if err := s.Scan(&key, &token, &live, &expires, &micros, &owner, &lockDelay, &delayedUntil, &delayMicros); err != nil {
		return backend.KeyInfo{}, err
	}
	info := backend.KeyInfo{Key: string(key), State: backend.KeyState{MaxToken: uint64(token)}}
	switch {
	case live:
		info.State.Live, info.State.Token, info.State.ExpiresAt = true, uint64(token), expires.Time
		info.State.Remaining = time.Duration(micros.Int64) * time.Microsecond
		info.State.Owner, info.State.LockDelay = owner, time.Duration(lockDelay)
	case delayedUntil.Valid:
		info.State.DelayedUntil = delayedUntil.Time
		info.State.DelayRemaining = time.Duration(delayMicros.Int64) * time.Microsecond
	}
	return info, nil
}

// DefaultListLimit is the page size of List when the caller gives none.
const DefaultListLimit = 100

// List implements backend.Lister: keys in byte order, in one statement per
// page; the cursor is the last key of the page before.
func (b *Backend) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	if err := b.ready(ctx); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	var page []backend.KeyInfo
	if b.dialect == Postgres {
		rows, err := b.db.QueryContext(ctx, b.sql.list, len(cursor), []byte(cursor), len(prefix), []byte(prefix), limit+1)
		if err != nil {
			return nil, "", b.classify(ctx, "list", err)
		}
		defer rows.Close()
		for rows.Next() {
			info, err := scanPG(rows)
			if err != nil {
				return nil, "", b.classify(ctx, "list", err)
			}
			page = append(page, info)
		}
		if err := rows.Err(); err != nil {
			return nil, "", b.classify(ctx, "list", err)
		}
	} else {
		err := b.rowTx(ctx, "list", func(c querier, now hostNow) error {
			now, err := b.txNow(ctx, c, now)
			if err != nil {
				return err
			}
			rows, err := c.QueryContext(ctx, b.sql.list, len(cursor), []byte(cursor), len(prefix), []byte(prefix), limit+1)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var key []byte
				var r leaseRow
				if err := rows.Scan(append([]any{&key}, r.fields()...)...); err != nil {
					return err
				}
				page = append(page, backend.KeyInfo{Key: string(key), State: r.state(now)})
			}
			return rows.Err()
		})
		if err != nil {
			return nil, "", err
		}
	}
	next := ""
	if len(page) > limit {
		page = page[:limit]
		next = page[limit-1].Key
	}
	return page, next, nil
}
