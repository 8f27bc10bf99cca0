package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// dialect is what differs between the SQL dialects: each operation of
// Backend checks its arguments and then calls its dialect, which does the
// work in the database's own way. postgres (postgres.go) calls the
// PL/pgSQL functions of records.go, one statement each; sqlite (sqlite.go)
// and mysql (mysql.go) run the Go code of the row dialects (rows.go) over
// hooks of their own (rowEngine). A fourth dialect is one more file and a
// line of dialects.
type dialect interface {
	// createTables runs the statements of DDL (CreateTables).
	createTables(ctx context.Context) error
	// checkSafety refuses a database that can lose a commit (New).
	checkSafety(ctx context.Context) error
	// schemaGaps lists what the backend's tables lack; tables is false
	// when the leases table does not exist (schemaError).
	schemaGaps(ctx context.Context) (missing []string, tables bool, err error)

	grant(ctx context.Context, req backend.Request) (backend.Lease, error)
	// grantMany grants every request in one transaction, in key order.
	grantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error)
	renew(ctx context.Context, req backend.Request) (backend.Lease, error)
	// release releases key's lease; wake says the key's waiters are to be
	// woken.
	release(ctx context.Context, key, leaseID string) (wake bool, err error)
	forceRelease(ctx context.Context, key string) (ended bool, err error)
	token(ctx context.Context, key string) (uint64, bool, error)
	inspect(ctx context.Context, key string) (backend.KeyState, error)
	// list returns up to limit keys after cursor that start with prefix,
	// in byte order.
	list(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, error)
	// admitToken locks key's lease in tx and reads its live token (AdmitTx).
	admitToken(ctx context.Context, tx *sql.Tx, key string) (int64, bool, error)

	// enqueue renews or adds waiterID's entry in key's line and reads its
	// place, with the seq of the entry directly ahead (0 at the head).
	enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (place backend.Place, aheadSeq int64, err error)
	// dequeue removes waiterID's entry and returns the tag (turnTag) of
	// the live entry now directly behind it, "" when there is none.
	dequeue(ctx context.Context, key, waiterID string) (behind string, err error)
	// turnPlaces reads, for each subscription, the seq of the live entry
	// directly ahead of its waiter's (0 at the head, seenAbsent when its
	// waiter's entry is not live).
	turnPlaces(ctx context.Context, subs []*subscription) ([]int64, error)
	lineLength(ctx context.Context, key string) (int, error)

	// liveTokens returns the token of each of keys that is not free: a
	// live lease's, or during a lock delay the last lease's (the poll).
	liveTokens(ctx context.Context, keys []string) (map[string]uint64, error)
	// pollInterval is how often the hub's poll reads the subscribed keys
	// and lines when no listener session tells it of releases.
	pollInterval() time.Duration

	// reclaim runs one batch of a retention pass (retention.go).
	reclaim(ctx context.Context) (n int, more bool, err error)
	// sweepClock is when passes are due: a clock that only schedules.
	sweepClock() int64
}

// dialects makes each Dialect's implementation for a Backend that New has
// configured; it refuses the options the dialect cannot honour.
var dialects = map[Dialect]func(b *Backend) (dialect, error){
	Postgres: newPostgres,
	SQLite:   newSQLite,
	MySQL:    newMySQL,
}

// isVerdict reports the contract's verdicts, returned bare.
func isVerdict(err error) bool {
	var held *backend.HeldError
	return errors.As(err, &held) || err == backend.ErrLeaseExpired || err == backend.ErrLeaseNotFound ||
		err == backend.ErrTokenSpaceExhausted
}
