package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// The row dialects, SQLite and MySQL, run one Go code: each operation is a
// transaction that reads the key's row (or the key's line) and the
// coordinator's clock, decides in Go and writes the row back. What differs
// between them is below that code, in their rowEngine: how a transaction
// begins and locks (SQLite's BEGIN IMMEDIATE takes the database's write
// lock; MySQL's SELECT ... FOR UPDATE locks the row) and whose clock
// decides (the host's boot clock; the server's, read in the statement).

// rowEngine is what a row dialect provides to rowDialect's code.
type rowEngine interface {
	// tx runs fn in a transaction that may write, on one connection of
	// the pool, its statements' arguments passed by numberedArgs. now is
	// the clock read when the transaction began (zero on MySQL, whose
	// statements read the server's). fn's error rolls it back; a COMMIT
	// that fails leaves the outcome unknown. what names the operation.
	tx(ctx context.Context, what string, fn func(c querier, now hostNow) error) error
	// scanRow runs query (the statements read, lockRead or admit) for
	// key on q and returns the row, whether there is one, and the
	// coordinator's clock after it.
	scanRow(ctx context.Context, q querier, query, key string) (leaseRow, bool, hostNow, error)
	// txNow is the coordinator's clock inside a transaction begun at now.
	txNow(ctx context.Context, c querier, now hostNow) (hostNow, error)
	// lockLine locks key's line for the transaction and returns the
	// coordinator's clock after it.
	lockLine(ctx context.Context, c querier, key string, now hostNow) (hostNow, error)
	// pollNow is the clock that the reads outside a transaction (turn,
	// lineLength) pass as their arguments.
	pollNow() hostNow
}

// rowDialect is the code of the row dialects, over eng; sqlite and mysql
// embed it and add what they do in a way of their own.
type rowDialect struct {
	b   *Backend
	eng rowEngine
}

// hostNow is one reading of the coordinator's clock: the HostClock's on
// SQLite, the server's on MySQL (serverNow).
type hostNow struct {
	boot  string
	since int64 // nanoseconds since boot
	wall  time.Time
}

func (b *Backend) hostNow() hostNow {
	boot, since, wall := b.clock.Now()
	return hostNow{boot: boot, since: int64(since), wall: wall}
}

// leaseRow is a key's row on the row dialects.
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

// fields are r's columns, for Scan, in the order of the read statement.
func (r *leaseRow) fields() []any {
	return []any{&r.token, &r.leaseID, &r.released, &r.boot, &r.expires, &r.ttl, &r.margin, &r.owner, &r.lockDelay, &r.delayUntil}
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

// idleFor is how long r's key has been idle at now: no live lease and no
// lock delay since the later of the lease's end (a release sets it) and
// the delay's. A row of another boot (SQLite) has been idle at least since
// this boot began. Zero while the key is not idle.
func (r *leaseRow) idleFor(now hostNow) time.Duration {
	switch {
	case r.boot != now.boot:
		return time.Duration(now.since)
	case r.live(now) || r.delayed(now):
		return 0
	}
	return time.Duration(now.since - max(r.expires, r.delayUntil))
}

// querier is a *sql.DB, *sql.Conn or *sql.Tx (or numberedArgs over one).
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

var numberedParam = regexp.MustCompile(`\?([0-9]+)`)

// numbered rewrites q's numbered parameters (?1) to ?, and returns the
// argument index of each.
func numbered(q string) (string, []int) {
	var order []int
	q = numberedParam.ReplaceAllStringFunc(q, func(p string) string {
		n, _ := strconv.Atoi(p[1:])
		order = append(order, n-1)
		return "?"
	})
	return q, order
}

// numberedArgs passes the arguments of a statement written with numbered
// parameters and rewritten by numbered (statements.order: MySQL's) in the
// order its ? take them. Other statements (and every statement on SQLite,
// which numbers its own) pass through.
type numberedArgs struct {
	q querier
	s *statements
}

func (m numberedArgs) args(query string, args []any) []any {
	order, ok := m.s.order[query]
	if !ok {
		return args
	}
	out := make([]any, len(order))
	for i, n := range order {
		out[i] = args[n]
	}
	return out
}

func (m numberedArgs) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return m.q.QueryRowContext(ctx, query, m.args(query, args)...)
}

func (m numberedArgs) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return m.q.QueryContext(ctx, query, m.args(query, args)...)
}

func (m numberedArgs) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return m.q.ExecContext(ctx, query, m.args(query, args)...)
}

// Retrying a busy database (SQLite) or a transaction rolled back (MySQL):
// the first waits are short, so a lock held for one short transaction
// costs little; later ones back off.
const (
	busyFirstWait = 200 * time.Microsecond
	busyMaxWait   = 20 * time.Millisecond
	// commitBound bounds the retries of a busy COMMIT, which do not end
	// with the caller's context (a transaction left open would hold the
	// write lock).
	commitBound = 30 * time.Second
)

// readRow reads key's row and the coordinator's clock after it; found is
// false when the key was never leased.
func (d *rowDialect) readRow(ctx context.Context, q querier, key string) (leaseRow, bool, hostNow, error) {
	return d.eng.scanRow(ctx, q, d.b.sql.read, key)
}

// lockRow is readRow inside a transaction that will write the row: on
// MySQL it locks the row (SELECT ... FOR UPDATE) and reads the server's
// clock once it holds the lock. SQLite's transaction holds the database's
// write lock already (its lockRead is its read).
func (d *rowDialect) lockRow(ctx context.Context, q querier, key string) (leaseRow, bool, hostNow, error) {
	return d.eng.scanRow(ctx, q, d.b.sql.lockRead, key)
}

// writeRow stores r as key's row.
func (d *rowDialect) writeRow(ctx context.Context, q querier, key string, r leaseRow, found bool) error {
	var err error
	if found {
		_, err = q.ExecContext(ctx, d.b.sql.update, r.token, r.leaseID, r.released, r.boot, r.expires, r.ttl, r.margin, r.owner,
			r.lockDelay, r.delayUntil, []byte(key))
	} else {
		_, err = q.ExecContext(ctx, d.b.sql.insert, []byte(key), r.token, r.leaseID, r.boot, r.expires, r.ttl, r.margin, r.owner,
			r.lockDelay, r.delayUntil)
	}
	return err
}

func (d *rowDialect) grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	var lease backend.Lease
	err := d.eng.tx(ctx, "grant", func(c querier, now hostNow) (err error) {
		lease, err = d.grantInTx(ctx, c, req)
		return err
	})
	if err != nil {
		return backend.Lease{}, err
	}
	return lease, nil
}

// grantInTx grants req in a transaction on c, judging by the
// coordinator's clock read with the row.
func (d *rowDialect) grantInTx(ctx context.Context, c querier, req backend.Request) (backend.Lease, error) {
	r, found, now, err := d.lockRow(ctx, c, req.Key)
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
		return rowLease(req.Key, &r, now), nil
	}
	if found && r.live(now) {
		return backend.Lease{}, &backend.HeldError{Remaining: r.remaining(now) + time.Duration(r.lockDelay)}
	}
	if found && r.delayed(now) {
		return backend.Lease{}, &backend.HeldError{Remaining: r.delayRemaining(now), Delayed: true}
	}
	if !found { // a key never leased, or reclaimed: it starts from the floor
		if r.token, err = d.readFloor(ctx, c); err != nil {
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
	if err := d.writeRow(ctx, c, req.Key, r, found); err != nil {
		return backend.Lease{}, err
	}
	return rowLease(req.Key, &r, now), nil
}

func rowLease(key string, r *leaseRow, now hostNow) backend.Lease {
	return backend.Lease{
		Key: key, LeaseID: r.leaseID, Token: uint64(r.token),
		TTL: time.Duration(r.ttl), Margin: time.Duration(r.margin), ExpiresAt: r.expiresAt(now),
	}
}

// readFloor reads the floor row's token in a grant's transaction: 0 when
// there is none.
func (d *rowDialect) readFloor(ctx context.Context, c querier) (int64, error) {
	var floor int64
	err := c.QueryRowContext(ctx, d.b.sql.floor).Scan(&floor)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return floor, err
}

// grantMany runs grantInTx for each request in one transaction.
func (d *rowDialect) grantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	leases := make([]backend.Lease, len(reqs))
	err := d.eng.tx(ctx, "grant", func(c querier, _ hostNow) error {
		for _, i := range backend.KeyOrder(reqs) {
			l, err := d.grantInTx(ctx, c, reqs[i])
			if isVerdict(err) {
				return &backend.ManyError{Index: i, Err: err}
			}
			if err != nil {
				return err
			}
			leases[i] = l
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return leases, nil
}

func (d *rowDialect) renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	var lease backend.Lease
	err := d.eng.tx(ctx, "renew", func(c querier, now hostNow) error {
		r, found, now, err := d.lockRow(ctx, c, req.Key)
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
		if err := d.writeRow(ctx, c, req.Key, r, true); err != nil {
			return err
		}
		lease = rowLease(req.Key, &r, now)
		return nil
	})
	return lease, err
}

func (d *rowDialect) release(ctx context.Context, key, leaseID string) (bool, error) {
	released := false
	err := d.eng.tx(ctx, "release", func(c querier, now hostNow) error {
		r, found, now, err := d.lockRow(ctx, c, key)
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
		return d.writeRow(ctx, c, key, r, true)
	})
	return released && err == nil, err
}

func (d *rowDialect) forceRelease(ctx context.Context, key string) (bool, error) {
	var ended bool
	err := d.eng.tx(ctx, "force release", func(c querier, now hostNow) error {
		r, found, now, err := d.lockRow(ctx, c, key)
		if err != nil || !found || !r.live(now) {
			return err
		}
		r.released, ended = true, true
		r.expires = now.since
		r.delayUntil = now.since + r.lockDelay // an unclean end: the delay runs from now
		return d.writeRow(ctx, c, key, r, true)
	})
	return ended, err
}

// list reads the page in one transaction, judged on its clock.
func (d *rowDialect) list(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, error) {
	var page []backend.KeyInfo
	err := d.eng.tx(ctx, "list", func(c querier, now hostNow) error {
		now, err := d.eng.txNow(ctx, c, now)
		if err != nil {
			return err
		}
		rows, err := c.QueryContext(ctx, d.b.sql.list, len(cursor), []byte(cursor), len(prefix), []byte(prefix), limit)
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
		return nil, err
	}
	return page, nil
}

func (d *rowDialect) enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, int64, error) {
	place := backend.Place{TTL: ttl}
	var aheadSeq int64
	s := &d.b.sql
	err := d.eng.tx(ctx, "enqueue", func(c querier, now hostNow) error {
		now, err := d.eng.lockLine(ctx, c, key, now)
		if err != nil {
			return err
		}
		k, expires := []byte(key), now.since+int64(ttl)
		// A live entry is renewed in place; otherwise the key's expired
		// entries go (the waiter's own included) and it joins at the end.
		res, err := c.ExecContext(ctx, s.renewEntry, k, waiterID, now.boot, now.since, expires)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if _, err := c.ExecContext(ctx, s.dropExpired, k, waiterID, now.boot, now.since); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, s.upsertEntry, k, waiterID, now.boot, now.since, expires); err != nil {
				return err
			}
		}
		var aheadExpires int64
		if err := c.QueryRowContext(ctx, s.ahead, k, waiterID, now.boot, now.since).Scan(&place.Ahead, &aheadSeq, &aheadExpires); err != nil {
			return err
		}
		if place.Ahead > 0 {
			place.AheadRemaining = time.Duration(aheadExpires - now.since)
		}
		return nil
	})
	if err != nil {
		return backend.Place{}, 0, err
	}
	return place, aheadSeq, nil
}

func (d *rowDialect) dequeue(ctx context.Context, key, waiterID string) (string, error) {
	next := ""
	s := &d.b.sql
	err := d.eng.tx(ctx, "dequeue", func(c querier, now hostNow) error {
		now, err := d.eng.lockLine(ctx, c, key, now)
		if err != nil {
			return err
		}
		k := []byte(key)
		var seq int64
		err = c.QueryRowContext(ctx, s.anyEntry, k, waiterID).Scan(&seq)
		if err == nil || errors.Is(err, sql.ErrNoRows) {
			if _, err := c.ExecContext(ctx, s.dropExpired, k, waiterID, now.boot, now.since); err != nil {
				return err
			}
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil // not in the line
		}
		if err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, s.removeEntry, k, waiterID); err != nil {
			return err
		}
		err = c.QueryRowContext(ctx, s.behind, k, waiterID, now.boot, now.since, seq).Scan(&next)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil || next == "" {
		return "", err
	}
	return turnTag(next), nil
}

// turnPlaces reads each key's line once, however many of its waiters are
// subscribed.
func (d *rowDialect) turnPlaces(ctx context.Context, subs []*subscription) ([]int64, error) {
	out := absentPlaces(len(subs))
	byKey := map[string][]int{}
	for i, s := range subs {
		byKey[s.key] = append(byKey[s.key], i)
	}
	for key, idx := range byKey {
		line, err := d.line(ctx, key)
		if err != nil {
			return nil, err
		}
		for _, i := range idx {
			for j, e := range line {
				if e.id == subs[i].waiterID {
					out[i] = 0
					if j > 0 {
						out[i] = line[j-1].seq
					}
					break
				}
			}
		}
	}
	return out, nil
}

// lineEntry is an entry of a line, as the poll reads it.
type lineEntry struct {
	id  string
	seq int64
}

// line reads key's live entries in their order, outside any transaction
// (a hint: the waiter's Enqueue decides).
func (d *rowDialect) line(ctx context.Context, key string) ([]lineEntry, error) {
	now := d.eng.pollNow()
	rows, err := numberedArgs{d.b.db, &d.b.sql}.QueryContext(ctx, d.b.sql.turn, []byte(key), now.boot, now.since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var line []lineEntry
	for rows.Next() {
		var e lineEntry
		if err := rows.Scan(&e.id, &e.seq); err != nil {
			return nil, err
		}
		line = append(line, e)
	}
	return line, rows.Err()
}

func (d *rowDialect) lineLength(ctx context.Context, key string) (int, error) {
	now := d.eng.pollNow()
	var n int
	if err := (numberedArgs{d.b.db, &d.b.sql}).QueryRowContext(ctx, d.b.sql.lineLength, []byte(key), now.boot, now.since).Scan(&n); err != nil {
		return 0, d.b.classify(ctx, "line length", err)
	}
	return n, nil
}

// liveTokens reads each key's row, outside any transaction (a hint: the
// waiter's grant decides).
func (d *rowDialect) liveTokens(ctx context.Context, keys []string) (map[string]uint64, error) {
	out := make(map[string]uint64, len(keys))
	for _, k := range keys {
		r, found, now, err := d.readRow(ctx, d.b.db, k)
		if err != nil {
			return nil, err
		}
		if found && (r.live(now) || r.delayed(now)) {
			out[k] = uint64(r.token)
		}
	}
	return out, nil
}

// reclaim runs one batch: it deletes up to reclaimBatch idle rows and the
// waiters' entries dead for the retention, and reports how many keys it
// reclaimed and whether a batch found more than it took.
func (d *rowDialect) reclaim(ctx context.Context) (n int, more bool, err error) {
	b := d.b
	err = d.eng.tx(ctx, "reclaim", func(c querier, now hostNow) error {
		n, more = 0, false
		now, err := d.eng.txNow(ctx, c, now)
		if err != nil {
			return err
		}
		since, otherBoot := now.since-int64(b.retention), now.since >= int64(b.retention)
		keys, err := d.idleKeys(ctx, c, since, otherBoot, now)
		if err != nil || len(keys) == 0 {
			return err
		}
		more = len(keys) == reclaimBatch
		// Lock the rows (MySQL; SQLite holds the write lock) and judge them
		// again on the clock read after the locks.
		rows, err := c.QueryContext(ctx, inList(b.sql.lockKeys, len(keys)), keys...)
		if err != nil {
			return err
		}
		var idle []any
		var top int64
		type locked struct {
			key []byte
			r   leaseRow
		}
		var all []locked
		for rows.Next() {
			var l locked
			if err := rows.Scan(append([]any{&l.key}, l.r.fields()...)...); err != nil {
				rows.Close()
				return err
			}
			all = append(all, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if now, err = d.eng.txNow(ctx, c, now); err != nil {
			return err
		}
		for _, l := range all {
			if l.r.idleFor(now) >= b.retention {
				idle = append(idle, l.key)
				top = max(top, l.r.token)
			}
		}
		if len(idle) > 0 {
			if _, err := c.ExecContext(ctx, inList(b.sql.deleteKeys, len(idle)), idle...); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, b.sql.raiseFloor, top); err != nil {
				return err
			}
			if b.sweep.hook != nil {
				b.sweep.hook()
			}
		}
		n = len(idle)
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	// The lines: entries dead for the retention, in a statement of their
	// own (they hold no token).
	dropped, err := d.dropDead(ctx)
	return n, more || dropped == reclaimBatch, err
}

// idleKeys lists up to reclaimBatch keys whose rows have been idle since
// since (on now's boot; rows of another boot when otherBoot), in key
// order.
func (d *rowDialect) idleKeys(ctx context.Context, c querier, since int64, otherBoot bool, now hostNow) ([]any, error) {
	rows, err := c.QueryContext(ctx, d.b.sql.idleKeys, now.boot, since, otherBoot, reclaimBatch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []any
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// dropDead deletes up to reclaimBatch waiters' entries that expired the
// retention ago, in a transaction of its own.
func (d *rowDialect) dropDead(ctx context.Context) (int64, error) {
	var n int64
	retention := int64(d.b.retention)
	err := d.eng.tx(ctx, "reclaim", func(c querier, now hostNow) error {
		now, err := d.eng.txNow(ctx, c, now)
		if err != nil {
			return err
		}
		res, err := c.ExecContext(ctx, d.b.sql.dropDead, now.boot, now.since-retention, now.since >= retention, reclaimBatch)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// inList is head, n placeholders and tail.
func inList(ht [2]string, n int) string {
	return ht[0] + strings.Repeat("?, ", n-1) + "?" + ht[1]
}
