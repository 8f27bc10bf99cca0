package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// postgres is the PostgreSQL dialect: every operation is one statement,
// most of them a call of a PL/pgSQL function of CreateTables (records.go),
// which locks the key, reads the server's clock and the cluster's epoch
// (epoch.go) and decides; Grant and Release try a plain statement first
// (pgrow.go). Only this dialect has a listener session (WithListener,
// notify.go), Health and AdoptCluster.
type postgres struct{ b *Backend }

func newPostgres(b *Backend) (dialect, error) {
	b.sql = pgStatements(b.prefix)
	return &postgres{b}, nil
}

// pgStatements are PostgreSQL's statements for prefix.
func pgStatements(prefix string) statements {
	s, r := newStatements(prefix)
	s.notifyChannel, s.turnChannel = channelName(prefix, "free"), channelName(prefix, "turn")
	for _, stmt := range []string{pgTable, pgUpgrade, pgWaiters, pgStorage, pgCluster, pgClusterRow, pgEpoch, pgNextToken, pgGrant, pgGrantV1, pgRenew, pgRelease, pgForceRelease, pgEnqueue, pgDequeue, pgAdmit, pgAdopt, pgFloorRow, pgReclaim} {
		s.ddl = append(s.ddl, r.Replace(stmt))
	}
	s.grantRow, s.releaseRow = pgRowStatements(r)
	s.grant = r.Replace(`SELECT outcome, token, expires_at, ttl_ns, margin_ns, remaining_us FROM {p}grant($1, $2, $3, $4, $5, $6)`)
	s.renew = r.Replace(`SELECT outcome, token, expires_at FROM {p}renew($1, $2, $3, $4)`)
	s.release = r.Replace(`SELECT {p}release($1, $2)`)
	s.forceRelease = r.Replace(`SELECT {p}force_release($1)`)
	s.adopt = r.Replace(`SELECT {p}adopt_cluster()`)
	s.clusterIDs = r.Replace(`SELECT coalesce((SELECT system_identifier FROM {c} LIMIT 1), 0), (SELECT system_identifier FROM pg_control_system())`)
	s.token = r.Replace(`SELECT token FROM {t} WHERE key = $1 AND NOT released AND expires_at > clock_timestamp()`)
	// The times are read only when they are later than n (else NULL):
	// an infinite timestamp can be neither subtracted from nor scanned.
	const cols = `key, token, NOT released AND expires_at > n, ` +
		`CASE WHEN expires_at > n THEN expires_at END, CASE WHEN expires_at > n THEN (extract(epoch FROM expires_at - n) * 1000000)::bigint END, ` +
		`owner, lock_delay_ns, ` +
		`CASE WHEN delay_until > n THEN delay_until END, CASE WHEN delay_until > n THEN ceil(extract(epoch FROM delay_until - n) * 1000000)::bigint END `
	s.inspect = r.Replace(`SELECT ` + cols +
		`FROM (SELECT *, clock_timestamp() AS n FROM {t} WHERE key = $1) AS l`)
	s.list = r.Replace(`SELECT ` + cols +
		`FROM (SELECT *, clock_timestamp() AS n FROM {t} WHERE key <> ''::bytea AND ($1 = 0 OR key > $2) AND ($3 = 0 OR substring(key FROM 1 FOR $3) = $4) ORDER BY key LIMIT $5) AS l ORDER BY key`)
	// Keys that are not free: a live lease, or a lock delay running.
	s.liveTokens = r.Replace(`SELECT key, token FROM (SELECT *, clock_timestamp() AS n FROM {t} WHERE key = ANY($1)) AS l ` +
		`WHERE NOT released AND expires_at > n OR delay_until > n`)
	s.admit = r.Replace(`SELECT {p}admit($1)`)
	s.enqueue = r.Replace(`SELECT ahead, ahead_seq, ahead_remaining_us FROM {p}enqueue($1, $2, $3)`)
	s.dequeue = r.Replace(`SELECT {p}dequeue($1, $2)`)
	// For each (key, waiter) asked about whose entry is live: the seq of
	// the live entry directly ahead of it, 0 at the head.
	s.turn = r.Replace(`SELECT s.k, s.id, coalesce((SELECT max(a.seq) FROM {w} AS a WHERE a.key = e.key AND a.seq < e.seq AND a.expires_at > c.n), 0) ` +
		`FROM (SELECT clock_timestamp() AS n) AS c CROSS JOIN unnest($1::bytea[], $2::text[]) AS s(k, id) ` +
		`JOIN {w} AS e ON e.key = s.k AND e.waiter_id = s.id AND e.expires_at > c.n`)
	s.lineLength = r.Replace(`SELECT count(*) FROM {w} WHERE key = $1 AND expires_at > clock_timestamp()`)
	s.records = r.Replace(`SELECT count(*) FROM {t} WHERE key <> ''::bytea`)
	s.reclaim = r.Replace(`SELECT reclaimed, more FROM {p}reclaim($1, $2)`)
	return s
}

// createLockKey is the key of the advisory lock that CreateTables takes on
// PostgreSQL, for every table prefix: concurrent DDL on one catalog fails
// ("tuple concurrently updated" for CREATE OR REPLACE FUNCTION, a duplicate
// pg_type row for CREATE TABLE IF NOT EXISTS) rather than wait.
const createLockKey = 0x66656e63696e6701 // "fencing" and 1

func (p *postgres) createTables(ctx context.Context) error {
	if err := p.runDDL(ctx); err != nil {
		if ctx.Err() != nil { // ended while waiting, maybe for another replica's DDL
			return fmt.Errorf("sqlbackend: create tables: %w", err)
		}
		return startError("create tables", err)
	}
	return p.b.checkLogged(ctx)
}

// runDDL runs DDL in one transaction that holds the advisory lock
// createLockKey.
func (p *postgres) runDDL(ctx context.Context) error {
	tx, err := p.b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", int64(createLockKey))); err != nil {
		return err
	}
	for _, stmt := range p.b.sql.ddl {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// checkSafety refuses fsync=off, synchronous_commit=off, a standby
// (pg_is_in_recovery), a read-only session (transaction_read_only) and an
// UNLOGGED lease table. It reads one connection of the pool: the others
// come from the same connection string.
func (p *postgres) checkSafety(ctx context.Context) error {
	var fsync, syncCommit, readOnly string
	var standby bool
	err := p.b.db.QueryRowContext(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), `+
		`current_setting('transaction_read_only'), pg_is_in_recovery()`).Scan(&fsync, &syncCommit, &readOnly, &standby)
	if err != nil {
		return contactError("PostgreSQL", "check the PostgreSQL server's settings", err)
	}
	switch {
	case standby:
		return &SafetyError{Setting: "pg_is_in_recovery()", Value: "true", Fix: "connect to the primary, not a standby"}
	case readOnly == "on":
		return &SafetyError{Setting: "transaction_read_only", Value: "on", Fix: "connect to a writable primary (target_session_attrs=read-write), or turn off default_transaction_read_only"}
	case fsync == "off":
		return &SafetyError{Setting: "fsync", Value: "off", Fix: "set fsync = on in postgresql.conf"}
	case syncCommit == "off":
		return &SafetyError{Setting: "synchronous_commit", Value: "off", Fix: "set synchronous_commit = on (or local, remote_write, remote_apply) for the backend's role or database"}
	}
	return p.b.checkLogged(ctx)
}

func (p *postgres) schemaGaps(ctx context.Context) (missing []string, tables bool, err error) {
	b := p.b
	var hasColumns, hasWaiters, hasGrant, hasEnqueue bool
	err = b.db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, `+
		`EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'delay_until' AND NOT attisdropped), `+
		`to_regclass($2) IS NOT NULL, to_regprocedure($3) IS NOT NULL, to_regprocedure($4) IS NOT NULL`,
		b.sql.table, b.sql.waiters, b.prefix+"grant(bytea,text,bigint,bigint,text,bigint)", b.prefix+"enqueue(bytea,text,bigint)").
		Scan(&tables, &hasColumns, &hasWaiters, &hasGrant, &hasEnqueue)
	if err != nil || !tables {
		return nil, false, err
	}
	for _, m := range []struct {
		ok   bool
		what string
	}{{hasColumns, "column delay_until of " + b.sql.table}, {hasWaiters, "table " + b.sql.waiters},
		{hasGrant, "function " + b.prefix + "grant with a lock delay"}, {hasEnqueue, "function " + b.prefix + "enqueue"}} {
		if !m.ok {
			missing = append(missing, m.what)
		}
	}
	return missing, true, nil
}

// grant is one statement: the upsert that takes a free key (pgrow.go) or,
// when it refuses, the grant function.
func (p *postgres) grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if l, ok, err := p.b.grantRow(ctx, req); ok || err != nil {
		return l, err
	}
	return p.grantFunc(ctx, p.b.db, req)
}

// grantFunc runs the grant function for req on q (the pool, or a
// transaction of GrantMany's), which locks the key's row.
func (p *postgres) grantFunc(ctx context.Context, q querier, req backend.Request) (backend.Lease, error) {
	var (
		outcome          int
		token, ttl, marg sql.NullInt64
		expires          sql.NullTime
		remainingMicros  sql.NullInt64
	)
	err := q.QueryRowContext(ctx, p.b.sql.grant, []byte(req.Key), req.LeaseID, int64(req.Timeout), int64(req.Margin), req.Owner, int64(req.LockDelay)).
		Scan(&outcome, &token, &expires, &ttl, &marg, &remainingMicros)
	if err != nil {
		return backend.Lease{}, p.b.classify(ctx, "grant", err)
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

// grantMany calls the grant function for each request in one transaction.
func (p *postgres) grantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	leases := make([]backend.Lease, len(reqs))
	tx, err := p.b.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, p.b.classify(ctx, "grant: begin", err)
	}
	defer tx.Rollback() // after a commit, a no-op
	for _, i := range backend.KeyOrder(reqs) {
		l, err := p.grantFunc(ctx, tx, reqs[i])
		if isVerdict(err) {
			return nil, &backend.ManyError{Index: i, Err: err}
		}
		if err != nil {
			return nil, err
		}
		leases[i] = l
	}
	if err := tx.Commit(); err != nil {
		return nil, p.b.classify(ctx, "grant: commit", err)
	}
	return leases, nil
}

func (p *postgres) renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	var (
		outcome int
		token   sql.NullInt64
		expires sql.NullTime
	)
	err := p.b.db.QueryRowContext(ctx, p.b.sql.renew, []byte(req.Key), req.LeaseID, int64(req.Timeout), int64(req.Margin)).
		Scan(&outcome, &token, &expires)
	if err != nil {
		return backend.Lease{}, p.b.classify(ctx, "renew", err)
	}
	if outcome != outGranted {
		return backend.Lease{}, verdict(outcome)
	}
	return backend.Lease{Key: req.Key, LeaseID: req.LeaseID, Token: uint64(token.Int64), TTL: req.Timeout, Margin: req.Margin, ExpiresAt: expires.Time}, nil
}

// release is the UPDATE of the live lease (pgrow.go) or, when that
// refuses, the release function; both notify listening waiters when they
// commit.
func (p *postgres) release(ctx context.Context, key, leaseID string) (bool, error) {
	b := p.b
	if ok, err := b.releaseRow(ctx, key, leaseID); err != nil {
		return false, err
	} else if ok {
		return true, nil
	}
	var outcome int
	if err := b.db.QueryRowContext(ctx, b.sql.release, []byte(key), leaseID).Scan(&outcome); err != nil {
		return false, b.classify(ctx, "release", err)
	}
	return outcome == outGranted, verdict(outcome)
}

func (p *postgres) forceRelease(ctx context.Context, key string) (bool, error) {
	var ended bool
	if err := p.b.db.QueryRowContext(ctx, p.b.sql.forceRelease, []byte(key)).Scan(&ended); err != nil {
		return false, p.b.classify(ctx, "force release", err)
	}
	return ended, nil
}

// token is one SELECT that judges expiry with clock_timestamp(), and a
// second read behind the key's lock when the first finds no live lease
// (tokenLocked).
func (p *postgres) token(ctx context.Context, key string) (uint64, bool, error) {
	var token int64
	err := p.b.pgQueryRow(ctx, p.b.sql.token, []any{[]byte(key)}, &token)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return p.tokenLocked(ctx, key)
	case err != nil:
		return 0, false, p.b.classify(ctx, "token", err)
	}
	return uint64(token), true, nil
}

// tokenLocked reads key's live token again behind the key's advisory lock
// (the admit function: shared with other readers, exclusive to grants,
// renewals and releases) in a fresh snapshot. The first SELECT's snapshot
// is taken before its clock_timestamp() is read: a renewal that committed
// between the two, before the old expiry, leaves that SELECT judging the
// old row at a later time, a lease ended that never was. Behind the lock no
// write to the key commits between the snapshot and the clock.
func (p *postgres) tokenLocked(ctx context.Context, key string) (uint64, bool, error) {
	var token sql.NullInt64
	if err := p.b.pgQueryRow(ctx, p.b.sql.admit, []any{[]byte(key)}, &token); err != nil {
		return 0, false, p.b.classify(ctx, "token", err)
	}
	if !token.Valid {
		return 0, false, nil
	}
	return uint64(token.Int64), true, nil
}

func (p *postgres) inspect(ctx context.Context, key string) (backend.KeyState, error) {
	info, err := scanPG(p.b.db.QueryRowContext(ctx, p.b.sql.inspect, []byte(key)))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backend.KeyState{}, nil
	case err != nil:
		return backend.KeyState{}, p.b.classify(ctx, "inspect", err)
	}
	return info.State, nil
}

func (p *postgres) list(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, error) {
	var page []backend.KeyInfo
	rows, err := p.b.db.QueryContext(ctx, p.b.sql.list, len(cursor), []byte(cursor), len(prefix), []byte(prefix), limit)
	if err != nil {
		return nil, p.b.classify(ctx, "list", err)
	}
	defer rows.Close()
	for rows.Next() {
		info, err := scanPG(rows)
		if err != nil {
			return nil, p.b.classify(ctx, "list", err)
		}
		page = append(page, info)
	}
	if err := rows.Err(); err != nil {
		return nil, p.b.classify(ctx, "list", err)
	}
	return page, nil
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

// admitToken calls the admit function (pgAdmit) in tx.
func (p *postgres) admitToken(ctx context.Context, tx *sql.Tx, key string) (int64, bool, error) {
	var live sql.NullInt64
	if err := tx.QueryRowContext(ctx, p.b.sql.admit, []byte(key)).Scan(&live); err != nil {
		return 0, false, p.b.classify(ctx, "admit", err)
	}
	return live.Int64, live.Valid, nil
}

func (p *postgres) enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, int64, error) {
	place := backend.Place{TTL: ttl}
	var aheadSeq, remainingMicros sql.NullInt64
	err := p.b.db.QueryRowContext(ctx, p.b.sql.enqueue, []byte(key), waiterID, int64(ttl)).Scan(&place.Ahead, &aheadSeq, &remainingMicros)
	if err != nil {
		return backend.Place{}, 0, p.b.classify(ctx, "enqueue", err)
	}
	if place.Ahead > 0 {
		place.AheadRemaining = max(time.Duration(remainingMicros.Int64)*time.Microsecond, time.Microsecond)
	}
	return place, aheadSeq.Int64, nil
}

func (p *postgres) dequeue(ctx context.Context, key, waiterID string) (string, error) {
	var tag sql.NullString
	if err := p.b.db.QueryRowContext(ctx, p.b.sql.dequeue, []byte(key), waiterID).Scan(&tag); err != nil {
		return "", p.b.classify(ctx, "dequeue", err)
	}
	return tag.String, nil
}

// turnPlaces is one statement for every subscription.
func (p *postgres) turnPlaces(ctx context.Context, subs []*subscription) ([]int64, error) {
	out := absentPlaces(len(subs))
	keys, ids := make([][]byte, len(subs)), make([]string, len(subs))
	for i, s := range subs {
		keys[i], ids[i] = []byte(s.key), s.waiterID
	}
	rows, err := p.b.db.QueryContext(ctx, p.b.sql.turn, keys, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type entry struct{ key, id string }
	ahead := make(map[entry]int64)
	for rows.Next() {
		var k []byte
		var id string
		var seq int64
		if err := rows.Scan(&k, &id, &seq); err != nil {
			return nil, err
		}
		ahead[entry{string(k), id}] = seq
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i, s := range subs {
		if seq, ok := ahead[entry{s.key, s.waiterID}]; ok {
			out[i] = seq
		}
	}
	return out, nil
}

func (p *postgres) lineLength(ctx context.Context, key string) (int, error) {
	var n int
	if err := p.b.db.QueryRowContext(ctx, p.b.sql.lineLength, []byte(key)).Scan(&n); err != nil {
		return 0, p.b.classify(ctx, "line length", err)
	}
	return n, nil
}

// liveTokens is one statement for all the keys.
func (p *postgres) liveTokens(ctx context.Context, keys []string) (map[string]uint64, error) {
	out := make(map[string]uint64, len(keys))
	arg := make([][]byte, len(keys))
	for i, k := range keys {
		arg[i] = []byte(k)
	}
	rows, err := p.b.db.QueryContext(ctx, p.b.sql.liveTokens, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k []byte
		var token int64
		if err := rows.Scan(&k, &token); err != nil {
			return nil, err
		}
		out[string(k)] = uint64(token)
	}
	return out, rows.Err()
}

func (p *postgres) pollInterval() time.Duration { return serverPoll }

// reclaim calls the reclaim function (pgReclaim).
func (p *postgres) reclaim(ctx context.Context) (n int, more bool, err error) {
	if err := p.b.db.QueryRowContext(ctx, p.b.sql.reclaim, int64(p.b.retention), reclaimBatch).Scan(&n, &more); err != nil {
		return 0, false, p.b.classify(ctx, "reclaim", err)
	}
	return n, more, nil
}

func (p *postgres) sweepClock() int64 { return p.b.monotonicSweepClock() }
