package sqlbackend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// hostNow is one reading of the HostClock.
type hostNow struct {
	boot  string
	since int64 // nanoseconds since boot
	wall  time.Time
}

func (b *Backend) hostNow() hostNow {
	boot, since, wall := b.clock.Now()
	return hostNow{boot: boot, since: int64(since), wall: wall}
}

// leaseRow is a key's row on SQLite.
type leaseRow struct {
	token    int64
	leaseID  string
	released bool
	boot     string
	expires  int64
	ttl      int64
	margin   int64
	owner    string
	// lockDelay is the lease's lock delay in nanoseconds; delayUntil is
	// when the key opens again after an unclean end, on the boot clock of
	// boot (see records.go).
	lockDelay  int64
	delayUntil int64
}

// live reports whether the row's lease is live at now: not released, of
// this boot and not past its end.
func (r *leaseRow) live(now hostNow) bool {
	return !r.released && r.boot == now.boot && r.expires > now.since
}

// delayed reports whether, at now, no lease is live and a lock delay runs.
// A delay of another boot has ended: every holder ended with that boot.
func (r *leaseRow) delayed(now hostNow) bool {
	return !r.live(now) && r.boot == now.boot && r.delayUntil > now.since
}

// delayRemaining is how long r's lock delay has left at now.
func (r *leaseRow) delayRemaining(now hostNow) time.Duration {
	return time.Duration(r.delayUntil - now.since)
}

// remaining is how long r's live lease has left at now.
func (r *leaseRow) remaining(now hostNow) time.Duration { return time.Duration(r.expires - now.since) }

func (r *leaseRow) expiresAt(now hostNow) time.Time { return now.wall.Add(r.remaining(now)) }

// querier is a *sql.DB, *sql.Conn or *sql.Tx (on MySQL wrapped in
// mysqlArgs).
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// readRow reads key's row and the coordinator's clock after it; found is
// false when the key was never leased. On SQLite the clock is the
// HostClock's; on MySQL the server's, read in the same statement.
func (b *Backend) readRow(ctx context.Context, q querier, key string) (leaseRow, bool, hostNow, error) {
	return b.scanRow(ctx, q, b.sql.read, key)
}

// lockRow is readRow inside a transaction that will write the row: on
// MySQL it locks the row (SELECT ... FOR UPDATE) and reads the server's
// clock once it holds the lock. SQLite's transaction holds the database's
// write lock already.
func (b *Backend) lockRow(ctx context.Context, q querier, key string) (leaseRow, bool, hostNow, error) {
	if b.dialect == MySQL {
		return b.scanRow(ctx, q, b.sql.lockRead, key)
	}
	return b.readRow(ctx, q, key)
}

func (b *Backend) scanRow(ctx context.Context, q querier, query, key string) (r leaseRow, found bool, now hostNow, err error) {
	if b.dialect == MySQL {
		var nanos int64
		err = q.QueryRowContext(ctx, query, []byte(key)).Scan(append(r.fields(), &found, &nanos)...)
		return r, found, serverNow(nanos), err
	}
	err = q.QueryRowContext(ctx, query, []byte(key)).Scan(r.fields()...)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, b.hostNow(), nil
	}
	return r, err == nil, b.hostNow(), err
}

// fields are r's columns, for Scan, in the order of the read statement.
func (r *leaseRow) fields() []any {
	return []any{&r.token, &r.leaseID, &r.released, &r.boot, &r.expires, &r.ttl, &r.margin, &r.owner, &r.lockDelay, &r.delayUntil}
}

// writeRow stores r as key's row.
func (b *Backend) writeRow(ctx context.Context, q querier, key string, r leaseRow, found bool) error {
	var err error
	if found {
		_, err = q.ExecContext(ctx, b.sql.update, r.token, r.leaseID, r.released, r.boot, r.expires, r.ttl, r.margin, r.owner,
			r.lockDelay, r.delayUntil, []byte(key))
	} else {
		_, err = q.ExecContext(ctx, b.sql.insert, []byte(key), r.token, r.leaseID, r.boot, r.expires, r.ttl, r.margin, r.owner,
			r.lockDelay, r.delayUntil)
	}
	return err
}

// Retrying a busy database: the first waits are short, so a lock held for
// one short transaction costs little; later ones back off.
const (
	busyFirstWait = 200 * time.Microsecond
	busyMaxWait   = 20 * time.Millisecond
	// commitBound bounds the retries of a busy COMMIT, which do not end
	// with the caller's context (a transaction left open would hold the
	// write lock).
	commitBound = 30 * time.Second
)

// retryBusy runs fn until it returns anything but SQLITE_BUSY, or ctx ends.
func retryBusy(ctx context.Context, fn func() error) error {
	wait := busyFirstWait
	for {
		err := fn()
		if !busy(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (waiting for the database's write lock: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, busyMaxWait)
	}
}

// rowTx runs fn in a BEGIN IMMEDIATE transaction on one connection of
// the pool: it takes the database's write lock (waiting while another
// connection or process holds it), then reads the host clock, so the
// request is dated when it is processed. fn's error rolls the transaction
// back; nothing of it is applied. A COMMIT that fails leaves the outcome
// unknown. what names the operation for errors.
//
// The transactions of one Backend run one at a time, in the order they
// came (SQLite has one writer at a time anyway): they wait for each other
// on a channel rather than in SQLite's busy handler, which sleeps between
// tries and lets a newcomer pass a waiter, so that under load no
// operation (a renewal) is passed over for long. Other processes (and
// other Backends on the file) still meet in the busy handler.
//
// On MySQL it is mysqlTx.
func (b *Backend) rowTx(ctx context.Context, what string, fn func(c querier, now hostNow) error) (err error) {
	if b.dialect == MySQL {
		return b.mysqlTx(ctx, what, fn)
	}
	select {
	case b.writer <- struct{}{}:
		defer func() { <-b.writer }()
	case <-ctx.Done():
		return fmt.Errorf("sqlbackend: %s: %w (waiting for this backend's other transactions)", what, ctx.Err())
	}
	var conn *sql.Conn
	// Opening a connection can find the database busy too (a pragma of
	// the connection string, such as journal_mode, needing a lock).
	if err := retryBusy(ctx, func() (err error) { conn, err = b.db.Conn(ctx); return err }); err != nil {
		return fmt.Errorf("sqlbackend: %s: %w", what, err)
	}
	discard := false
	defer func() {
		if discard { // a connection in an unknown transaction state is not reused
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}()
	if err := retryBusy(ctx, func() error {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		return err
	}); err != nil {
		// The driver can report a context's end for a BEGIN that did
		// begin: the connection may be inside a transaction.
		discard = true
		return fmt.Errorf("sqlbackend: %s: begin: %w", what, err)
	}
	if err := fn(conn, b.hostNow()); err != nil {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			discard = true
		}
		if isVerdict(err) {
			return err
		}
		if missingSchema(err) {
			return b.schemaError(ctx, what, err)
		}
		return fmt.Errorf("sqlbackend: %s: %w", what, err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitBound)
	defer cancel()
	if err := retryBusy(cctx, func() error {
		_, err := conn.ExecContext(cctx, "COMMIT")
		return err
	}); err != nil {
		discard = true
		return fmt.Errorf("sqlbackend: %s: commit: %w: %w", what, backend.ErrOutcomeUnknown, err)
	}
	return nil
}

// isVerdict reports the contract's verdicts, returned bare.
func isVerdict(err error) bool {
	var held *backend.HeldError
	return errors.As(err, &held) || err == backend.ErrLeaseExpired || err == backend.ErrLeaseNotFound ||
		err == backend.ErrTokenSpaceExhausted
}
