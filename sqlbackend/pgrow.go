package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// The common cases of Grant and Release on PostgreSQL, each one plain
// statement instead of a call of the grant or release function.
//
// A PL/pgSQL function that locks the row (SELECT ... FOR UPDATE) and then
// writes it runs two statements and the function's own machinery in the
// server; one INSERT ... ON CONFLICT ... DO UPDATE ... WHERE, or one
// UPDATE ... WHERE, does the same in one. Each statement below writes only
// when the function would have written the same thing, under the same
// conditions, judged on the row it has locked with clock_timestamp() read
// after the lock; when its WHERE refuses (a live lease, a lock delay, a
// resend of this lease's grant, a counter at its end; a lease released,
// expired or not this one) it writes nothing and returns no row, and the
// function is called to judge and answer. Such refusals cost a second
// round trip, taken only off the common path.
//
// The statements must mirror every check, lock and computation that the
// functions make before they write (the token's next value, any lock the
// functions take on the key before its row, any check that raises): a
// function that gains one needs it here too, or pgRowStatements must return
// empty strings, which turns these statements off (grantRow and releaseRow
// then always defer to the functions).
//
// The grant's new expiry counts from the clock read before the row was
// locked (excluded's): the lease ends no later than the function's would
// and no earlier than the request's timeout after it was sent, as the
// Coordinator counts it.

// pgRowStatements returns the grant and release statements, with r's
// names spliced in.
func pgRowStatements(r *strings.Replacer) (grant, release string) {
	// As the functions: the epoch (which refuses a standby, an unlogged
	// table, another cluster's tables) and the key's advisory lock, before
	// the row; the token from next_token. excluded.token is next_token(0,
	// epoch): the floor's next token, read after the key's lock (epoch.go),
	// whose epoch bits are the later of the epoch and the floor's.
	grant = r.Replace(`INSERT INTO {t} AS l (key, token, lease_id, released, expires_at, ttl_ns, margin_ns, owner, lock_delay_ns, delay_until)
	SELECT $1, {p}next_token(0, c.ep), $2, false, c.n + c.d, $3, $4, $5, $6, c.n + c.d + c.dd
	FROM (SELECT e.ep, k.locked, clock_timestamp() AS n,
		(($3::bigint + $4::bigint + 999) / 1000) * INTERVAL '1 microsecond' AS d,
		(($6::bigint + 999) / 1000) * INTERVAL '1 microsecond' AS dd
		FROM (SELECT {p}epoch() AS ep OFFSET 0) AS e,
		LATERAL (SELECT e.ep, pg_advisory_xact_lock(hashtextextended('{t}:' || encode($1::bytea, 'hex'), 0)) IS NULL AS locked OFFSET 0) AS k) AS c
	WHERE c.ep IS NOT NULL
	ON CONFLICT (key) DO UPDATE SET token = {p}next_token(l.token, excluded.token >> 44), lease_id = excluded.lease_id, released = false,
		expires_at = excluded.expires_at, ttl_ns = excluded.ttl_ns, margin_ns = excluded.margin_ns,
		owner = excluded.owner, lock_delay_ns = excluded.lock_delay_ns, delay_until = excluded.delay_until
	WHERE l.lease_id <> excluded.lease_id
		AND (l.released OR l.expires_at <= clock_timestamp())
		AND l.delay_until <= clock_timestamp()
		AND {p}next_token(l.token, excluded.token >> 44) IS NOT NULL
	RETURNING l.token, l.expires_at`)
	release = r.Replace(`UPDATE {t} AS l SET released = true, delay_until = '-infinity', expires_at = clock_timestamp()
	FROM (SELECT pg_advisory_xact_lock(hashtextextended('{t}:' || encode($1::bytea, 'hex'), 0)) IS NULL AS locked OFFSET 0) AS k
	WHERE l.key = $1 AND l.lease_id = $2 AND NOT l.released AND l.expires_at > clock_timestamp()
	RETURNING CASE WHEN {nobody_listens} THEN false ELSE (SELECT true FROM pg_notify('{ch}', encode(l.key, 'hex'))) END`)
	return grant, release
}

// grantRow tries the grant statement; ok is false when it refused and
// the grant function must judge.
func (b *Backend) grantRow(ctx context.Context, req backend.Request) (l backend.Lease, ok bool, err error) {
	if b.sql.grantRow == "" {
		return backend.Lease{}, false, nil
	}
	var (
		token   int64
		expires time.Time
	)
	err = b.pgQueryRow(ctx, b.sql.grantRow, []any{[]byte(req.Key), req.LeaseID, int64(req.Timeout), int64(req.Margin), req.Owner, int64(req.LockDelay)},
		&token, &expires)
	if errors.Is(err, sql.ErrNoRows) || readOnly(err) {
		return backend.Lease{}, false, nil
	}
	if err != nil {
		return backend.Lease{}, false, b.classify(ctx, "grant", err)
	}
	return backend.Lease{
		Key: req.Key, LeaseID: req.LeaseID, Token: uint64(token),
		TTL: req.Timeout, Margin: req.Margin, ExpiresAt: expires,
	}, true, nil
}

// releaseRow tries the release statement; ok is false when it refused
// and the release function must judge.
func (b *Backend) releaseRow(ctx context.Context, key, leaseID string) (ok bool, err error) {
	if b.sql.releaseRow == "" {
		return false, nil
	}
	var notified bool
	err = b.pgQueryRow(ctx, b.sql.releaseRow, []any{[]byte(key), leaseID}, &notified)
	if errors.Is(err, sql.ErrNoRows) || readOnly(err) {
		return false, nil
	}
	if err != nil {
		return false, b.classify(ctx, "release", err)
	}
	return true, nil
}

// readOnly reports a statement refused by a read-only transaction (a
// standby): the function then says why, as it does for a grant.
func readOnly(err error) bool {
	var st sqlStater
	return errors.As(err, &st) && st.SQLState() == "25006"
}
