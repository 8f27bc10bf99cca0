package sqlbackend

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Reclaiming idle keys (WithRetention).
//
// A pass deletes, a batch (reclaimBatch rows) per transaction, the rows of
// keys idle for the retention (no live lease, no lock delay: the later of
// expires_at and delay_until is the retention ago), and raises the floor
// row to the highest token it deleted in the same transaction; then the
// waiters' entries that expired the retention ago. A grant on a key with no
// row mints the floor's next token, read after it has locked the key (see
// records.go), so it either runs before the delete (it finds the row, which
// is then no longer idle, and the delete leaves it) or after its commit (it
// finds no row and reads the raised floor):
//
//   - PostgreSQL: the reclaim function takes each idle key's advisory lock
//     with pg_try_advisory_xact_lock, skipping a key whose lock a grant,
//     renewal, release or token check holds, and deletes the locked rows
//     that are still idle in a statement of its own (a snapshot after the
//     locks). A grant takes the key's advisory lock first and reads the
//     floor in next_token's own snapshot, after the lock: a grant that
//     waited for the reclamation's commit reads the floor it raised.
//   - MySQL: the idle rows are locked (SELECT ... FOR UPDATE, by primary
//     key, in key order) and judged again on the server's clock after the
//     lock; a grant locks its key's row (or the gap) the same way and reads
//     the floor with a locking read (LOCK IN SHARE MODE), which sees the
//     latest commit where a plain read would see the transaction's
//     snapshot. The shared lock lives in InnoDB's lock table, not the row.
//   - SQLite: BEGIN IMMEDIATE serializes the pass and every grant.
//
// No goroutine runs while no pass is due: a Grant, GrantMany, Renew or
// Release that finds one due starts one, which runs batches until one finds
// fewer than a batch of idle rows (or deletes none: their keys busy), and
// the next pass is due retention/8 after it ended. Close cancels a running
// pass and waits for it. A pass's errors end it (the next is due as after
// any pass) and are logged at the warning level.

// DefaultRetention is the retention of a backend made without
// WithRetention.
const DefaultRetention = 24 * time.Hour

// reclaimBatch is how many rows a transaction of a pass deletes at most.
const reclaimBatch = 1000

// reclaimBound bounds one batch's transaction.
const reclaimBound = 30 * time.Second

// WithRetention sets how long a key's rows outlive the key's last use (see
// the package doc's "Retention" and backend's contract): once a key has had
// no live lease and no lock delay for d, a later pass deletes its row, and
// its next grant mints a token above every token it had, from the floor
// row. The same goes for the entries of a line (Queuer) that expired d ago.
// d <= 0 keeps every row for ever, as before the retention existed.
//
// The default, DefaultRetention (24 hours), is long enough that no
// operator, renewal or resent request meets a reclaimed key after anything
// short of a day-long partition (a resend after the retention may get a
// new lease instead of its first answer), and short enough that a lock per
// job or order leaves a day of rows, not a table that only grows. Passes
// are due retention/8 apart, so a key idle for d is gone within about
// d + d/8 and one pass, provided grants on any key of this backend start
// passes (so do renewals and releases); a backend that nobody calls
// deletes nothing.
func WithRetention(d time.Duration) Option {
	return func(b *Backend) { b.retention = max(d, 0) }
}

// sweeper is a backend's reclaiming: when the next pass is due, whether one
// runs, and how many keys the passes reclaimed.
type sweeper struct {
	due       atomic.Int64 // when the next pass is due on sweepClock; MaxInt64 when retention is off
	running   atomic.Bool
	reclaimed atomic.Uint64
	every     int64     // the time from the end of a pass to the next
	start     time.Time // sweepClock's zero (PostgreSQL, MySQL)

	mu      sync.Mutex // guards stopped and wg.Add against Close
	stopped bool
	wg      sync.WaitGroup
	ctx     context.Context // ended by Close
	cancel  context.CancelFunc

	hook func() // tests: called in a batch's transaction once it has deleted rows and raised the floor
}

// startSweep schedules the first pass retention/8 after New.
func (b *Backend) startSweep() {
	w := &b.sweep
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.start = time.Now()
	if b.retention <= 0 {
		w.due.Store(math.MaxInt64)
		return
	}
	w.every = max(int64(b.retention)/8, 1)
	w.due.Store(b.sweepClock() + w.every)
}

// sweepClock is when passes are due: on SQLite the HostClock's time since
// boot (a fake clock in tests moves it), elsewhere the host's monotonic
// clock since New. It only schedules; what is idle is decided by the
// coordinator's clock.
func (b *Backend) sweepClock() int64 { return b.dialect.sweepClock() }

// monotonicSweepClock is the host's monotonic clock since New.
func (b *Backend) monotonicSweepClock() int64 { return int64(time.Since(b.sweep.start)) }

// driveSweep starts a pass when one is due and none runs.
func (b *Backend) driveSweep() {
	w := &b.sweep
	if b.sweepClock() < w.due.Load() || !w.running.CompareAndSwap(false, true) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		w.running.Store(false)
		return
	}
	w.wg.Add(1)
	go b.sweepPass()
}

// stopSweep ends a running pass and waits for it (Close).
func (b *Backend) stopSweep() {
	w := &b.sweep
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
}

func (b *Backend) sweepPass() {
	w := &b.sweep
	defer w.wg.Done()
	for w.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(w.ctx, reclaimBound)
		n, more, err := b.dialect.reclaim(ctx)
		cancel()
		w.reclaimed.Add(uint64(n))
		if err != nil {
			if w.ctx.Err() == nil {
				b.logger.Warn("sqlbackend: reclaiming idle keys failed; the next pass tries again", "table", b.sql.table, "error", err)
			}
			break
		}
		if !more || n == 0 { // a batch that deleted no key (all busy) ends the pass too
			break
		}
	}
	w.due.Store(b.sweepClock() + w.every)
	w.running.Store(false)
}

// Size implements backend.Sizer: Records is a count of the backend's key
// rows (count(*) over its table, the floor row left out: a scan of the
// primary key's index), Reclaimed the keys this Backend's passes deleted.
func (b *Backend) Size(ctx context.Context) (backend.StoreSize, error) {
	if err := b.ready(ctx, nil); err != nil {
		return backend.StoreSize{}, err
	}
	var n int64
	if err := b.db.QueryRowContext(ctx, b.sql.records).Scan(&n); err != nil {
		return backend.StoreSize{}, b.classify(ctx, "size", err)
	}
	return backend.StoreSize{Records: n, Reclaimed: b.sweep.reclaimed.Load()}, nil
}

// pgFloorRow is the floor row, made by CreateTables (records.go).
const pgFloorRow = `INSERT INTO {t} (key, token, lease_id, released, expires_at, ttl_ns, margin_ns)
	VALUES (''::bytea, 0, '', true, '-infinity', 0, 0) ON CONFLICT (key) DO NOTHING`

// pgReclaim is a batch of a pass on PostgreSQL (see the top of this file),
// in one transaction: up to p_limit idle rows whose advisory lock it gets,
// deleted, the floor raised to their highest token; then up to p_limit
// waiters' entries dead for the retention. more says a batch found as
// many as it could take.
const pgReclaim = `CREATE OR REPLACE FUNCTION {p}reclaim(p_retention BIGINT, p_limit INT, OUT reclaimed INT, OUT more BOOLEAN)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	d INTERVAL := (p_retention / 1000) * INTERVAL '1 microsecond';
	found_n INT;
	ks BYTEA[];
	top BIGINT;
	w INT;
BEGIN
	SELECT count(*), array_agg(s.key) FILTER (WHERE pg_try_advisory_xact_lock(hashtextextended('{t}:' || encode(s.key, 'hex'), 0)))
		INTO found_n, ks
		FROM (SELECT l.key FROM {t} AS l
			WHERE l.key <> ''::bytea AND l.expires_at <= clock_timestamp() - d AND l.delay_until <= clock_timestamp() - d
			LIMIT p_limit) AS s;
	more := found_n >= p_limit;
	reclaimed := 0;
	IF ks IS NOT NULL THEN
		WITH del AS (
			DELETE FROM {t} AS l WHERE l.key = ANY(ks)
				AND l.expires_at <= clock_timestamp() - d AND l.delay_until <= clock_timestamp() - d
			RETURNING l.token)
		SELECT count(*), max(del.token) INTO reclaimed, top FROM del;
		IF reclaimed > 0 THEN
			INSERT INTO {t} AS l (key, token, lease_id, released, expires_at, ttl_ns, margin_ns)
				VALUES (''::bytea, top, '', true, '-infinity', 0, 0)
				ON CONFLICT (key) DO UPDATE SET token = greatest(l.token, excluded.token);
		END IF;
	END IF;
	DELETE FROM {w} AS x WHERE x.ctid = ANY(ARRAY(
		SELECT y.ctid FROM {w} AS y WHERE y.expires_at <= clock_timestamp() - d LIMIT p_limit));
	GET DIAGNOSTICS w = ROW_COUNT;
	more := more OR w >= p_limit;
END
$fn$`
