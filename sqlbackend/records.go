package sqlbackend

import (
	"regexp"
	"strings"
)

// Storage layout. Two tables. <prefix>leases holds one row per key leased
// within the retention (WithRetention; every key ever leased when it is
// off), and the floor row:
//
//	key           the key's bytes (BYTEA / BLOB), the primary key
//	token         the highest token ever minted on the key (BIGINT / INTEGER);
//	              on PostgreSQL epoch<<EpochShift | counter (epoch.go)
//	lease_id      the most recent lease's ID
//	released      whether that lease was released (or force-released)
//	expires_at    when it ends: a TIMESTAMPTZ on the PostgreSQL server's clock;
//	              on SQLite nanoseconds since boot on the host's boot clock,
//	              with boot_id naming the boot (see HostClock)
//	ttl_ns        the lease's timeout and margin as granted, in nanoseconds,
//	margin_ns     so that a resent grant returns the lease unchanged
//	owner         the holder's public name ('' when none is given)
//	lock_delay_ns the lease's lock delay as granted (0: none)
//	delay_until   when the key opens again if the lease has ended uncleanly:
//	              expires_at + lock delay while it runs (kept by the grant and
//	              every renewal), the moment of a forced release + lock delay
//	              after one, and none ('-infinity' / 0) after a release by the
//	              holder. On SQLite it is on the boot clock of boot_id.
//
// A lease is live when it is not released and expires_at is later than the
// coordinator's clock; a key with no live lease is in a lock delay while
// delay_until is later than that clock. A release (by the holder or forced)
// sets expires_at to its moment, so that a key is idle from the later of
// expires_at and delay_until (on SQLite: or from the start of the boot,
// for a row of an earlier boot), and reclaimed once that is the retention
// ago (retention.go).
//
// The floor row is the row of the empty key, which no request can name
// (keys are at least one byte long): its token is the highest token of
// every row a reclamation deleted, raised in the transaction that deletes
// them, and a key with no row starts from it (on PostgreSQL next_token(0,
// epoch) reads it). Its other columns say a lease released long ago; no
// read of keys (List, Size) counts it, and no reclamation deletes it.
// CreateTables inserts it; the first reclamation does on tables made
// before it existed.
//
// <prefix>waiters holds the lines of Queuer, one row per live (or expired,
// not yet dropped) entry:
//
//	key, waiter_id the line's key and the waiter's ID: the primary key
//	seq            the entry's place: larger than every entry of the key
//	               that was in the line when it joined; a renewal keeps it
//	expires_at     when the entry leaves the line unless renewed, on the
//	               same clock as a lease's (boot_id with it on SQLite)
//
// Expired entries of a key are deleted by the next join (an Enqueue that
// adds an entry) or Dequeue on that key; a key nobody waits on again keeps
// its dead entries (a few rows). On SQLite the table is WITHOUT ROWID, with
// an index on (key, seq, expires_at, boot_id) that the place reads use.
//
// On PostgreSQL <prefix>cluster holds one row (cluster.go): the system
// identifier of the cluster the tables belong to and the epoch base.
//
// On PostgreSQL the operations are PL/pgSQL functions (<prefix>grant,
// <prefix>renew, <prefix>release, <prefix>force_release, <prefix>enqueue,
// <prefix>dequeue), so each is one statement, one round trip and one
// transaction; on SQLite they are short BEGIN IMMEDIATE transactions on one
// connection of the caller's pool.

// DefaultPrefix starts the name of every table and function the backend
// uses, unless WithTablePrefix sets another. It differs from package
// sqlguard's fences table (fencing_fences), so both live in one schema.
const DefaultPrefix = "fencing_"

// prefixPattern is what WithTablePrefix accepts: an unquoted identifier
// start, optionally schema-qualified ("app.fencing_").
var prefixPattern = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,40}\.)?[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// statements are a dialect's SQL with the prefix spliced in.
type statements struct {
	ddl []string // CREATE TABLE / FUNCTION, in order
	// upgrade adds the columns an earlier release's table lacks. On
	// PostgreSQL it is empty (ddl does it, with IF NOT EXISTS); SQLite has
	// no ADD COLUMN IF NOT EXISTS, and CreateTables skips the statements
	// whose column exists (DDL documents them).
	upgrade []string

	// PostgreSQL: one statement per operation, and the plain statements
	// of a common grant and release (pgrow.go).
	grant, renew, release, forceRelease string
	grantRow, releaseRow                string
	// Both dialects.
	token, inspect, list, admit, liveTokens string
	// Queuer (queue.go): both dialects.
	enqueue, dequeue, turn string

	// SQLite: the rows the Go code reads and writes inside BEGIN IMMEDIATE.
	read, insert, update, touch string
	// SQLite's queue statements, inside BEGIN IMMEDIATE.
	renewEntry, dropExpired, upsertEntry, ahead, anyEntry, removeEntry, behind string

	// MySQL (mysql.go): the row locked, the clock, the line locked, and
	// the order of the arguments of each statement with numbered
	// parameters.
	lockRead, now, lockLine string
	order                   map[string][]int

	// Retention (retention.go). records counts the key rows (Sizer). The
	// row dialects: floor reads the floor (a locking read on MySQL),
	// raiseFloor raises it; idleKeys lists rows idle since a moment;
	// lockKeys and deleteKeys are a head and a tail to put a list of
	// placeholders between (lockKeys locks the rows on MySQL); dropDead
	// deletes the waiters' entries dead since that moment. PostgreSQL:
	// reclaim calls the reclaim function.
	records, floor, raiseFloor, idleKeys, dropDead, reclaim string
	// lockFloor locks the floor row for an update (MySQL: a grant run
	// again after a deadlock, see mysqlTx).
	lockFloor            string
	lockKeys, deleteKeys [2]string

	// PostgreSQL: the cluster (cluster.go).
	adopt, clusterIDs string

	notifyChannel string // PostgreSQL's NOTIFY channel for releases
	turnChannel   string // and for a line's entries leaving
	lineLength    string // LineReader: a key's live entries
	table         string
	waiters       string
	cluster       string
}

func newStatements(d Dialect, prefix string) statements {
	t, w, c := prefix+"leases", prefix+"waiters", prefix+"cluster"
	s := statements{table: t, waiters: w, cluster: c}
	r := strings.NewReplacer("{t}", t, "{w}", w, "{c}", c, "{p}", prefix, "{ch}", channelName(prefix, "free"), "{tch}", channelName(prefix, "turn"),
		"{nobody_listens}", pgNobodyListens(channelName(prefix, "free")))
	if d == Postgres {
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
	if d == MySQL {
		mysqlStatements(&s, r)
		return s
	}
	bare := channelName(prefix, "waiters") // the table's name without its schema, as CREATE INDEX ... ON takes it
	s.ddl = []string{r.Replace(sqliteTable), r.Replace(sqliteWaiters),
		r.Replace(`CREATE INDEX IF NOT EXISTS {w}_line ON ` + bare + ` (key, seq, expires_at, boot_id)`),
		r.Replace(`INSERT OR IGNORE INTO {t} (key, token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns) VALUES (x'', 0, '', 1, '', 0, 0, 0)`)}
	s.upgrade = []string{
		r.Replace(`ALTER TABLE {t} ADD COLUMN lock_delay_ns INTEGER NOT NULL DEFAULT 0`),
		r.Replace(`ALTER TABLE {t} ADD COLUMN delay_until INTEGER NOT NULL DEFAULT 0`),
	}
	const cols = `token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns, owner, lock_delay_ns, delay_until`
	s.read = r.Replace(`SELECT ` + cols + ` FROM {t} WHERE key = ?`)
	s.insert = r.Replace(`INSERT INTO {t} (key, ` + cols + `) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?)`)
	s.update = r.Replace(`UPDATE {t} SET token = ?, lease_id = ?, released = ?, boot_id = ?, expires_at = ?, ttl_ns = ?, margin_ns = ?, owner = ?, ` +
		`lock_delay_ns = ?, delay_until = ? WHERE key = ?`)
	s.list = r.Replace(`SELECT key, ` + cols + ` FROM {t} WHERE key <> x'' AND (?1 = 0 OR key > ?2) AND (?3 = 0 OR substr(key, 1, ?3) = ?4) ORDER BY key LIMIT ?5`)
	// A write that changes nothing: it takes the database's write lock in
	// the caller's transaction (AdmitTx).
	s.touch = r.Replace(`UPDATE {t} SET token = token WHERE key = ?`)
	// The queue: ?1 key, ?2 waiter, ?3 boot, ?4 now (since boot).
	const liveEntry = `boot_id = ?3 AND expires_at > ?4`
	s.renewEntry = r.Replace(`UPDATE {w} SET expires_at = ?5 WHERE key = ?1 AND waiter_id = ?2 AND ` + liveEntry)
	s.dropExpired = r.Replace(`DELETE FROM {w} WHERE key = ?1 AND NOT (` + liveEntry + `)`)
	// After dropExpired, every entry of the key is live: a new entry gets
	// the key's largest seq + 1.
	s.upsertEntry = r.Replace(`INSERT INTO {w} (key, waiter_id, seq, boot_id, expires_at) ` +
		`VALUES (?1, ?2, (SELECT coalesce(max(seq), 0) + 1 FROM {w} WHERE key = ?1), ?3, ?5) ` +
		`ON CONFLICT (key, waiter_id) DO UPDATE SET expires_at = excluded.expires_at`)
	// The place: how many live entries are ahead, the seq and end of the
	// live one directly ahead.
	s.ahead = r.Replace(`SELECT (SELECT count(*) FROM {w} AS a WHERE a.key = ?1 AND a.seq < m.seq AND a.boot_id = ?3 AND a.expires_at > ?4), ` +
		`coalesce(d.seq, 0), coalesce(d.expires_at, 0) ` +
		`FROM (SELECT seq FROM {w} WHERE key = ?1 AND waiter_id = ?2) AS m ` +
		`LEFT JOIN {w} AS d ON d.key = ?1 AND d.seq = ` +
		`(SELECT max(x.seq) FROM {w} AS x WHERE x.key = ?1 AND x.seq < m.seq AND x.boot_id = ?3 AND x.expires_at > ?4)`)
	s.anyEntry = r.Replace(`SELECT seq FROM {w} WHERE key = ?1 AND waiter_id = ?2`)
	s.removeEntry = r.Replace(`DELETE FROM {w} WHERE key = ?1 AND waiter_id = ?2`)
	s.behind = r.Replace(`SELECT waiter_id FROM {w} WHERE key = ?1 AND seq > ?5 AND ` + liveEntry + ` ORDER BY seq LIMIT 1`)
	// A key's live entries in order, for the poll.
	s.turn = r.Replace(`SELECT waiter_id, seq FROM {w} WHERE key = ?1 AND boot_id = ?2 AND expires_at > ?3 ORDER BY seq`)
	s.lineLength = r.Replace(`SELECT count(*) FROM {w} WHERE key = ?1 AND boot_id = ?2 AND expires_at > ?3`)
	// Retention: ?1 the boot, ?2 the moment (since boot) rows must have
	// been idle since, ?3 whether rows of another boot have (the boot is at
	// least the retention old), ?4 how many.
	s.records = r.Replace(`SELECT count(*) FROM {t} WHERE key <> x''`)
	s.floor = r.Replace(`SELECT token FROM {t} WHERE key = x''`)
	s.raiseFloor = r.Replace(`INSERT INTO {t} (key, token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns) VALUES (x'', ?, '', 1, '', 0, 0, 0) ` +
		`ON CONFLICT (key) DO UPDATE SET token = max(token, excluded.token)`)
	s.idleKeys = r.Replace(`SELECT key FROM {t} WHERE key <> x'' AND (boot_id <> ?1 AND ?3 OR boot_id = ?1 AND max(expires_at, delay_until) <= ?2) ` +
		`ORDER BY key LIMIT ?4`)
	s.lockKeys = [2]string{r.Replace(`SELECT key, ` + cols + ` FROM {t} WHERE key IN (`), `)`}
	s.deleteKeys = [2]string{r.Replace(`DELETE FROM {t} WHERE key IN (`), `)`}
	s.dropDead = r.Replace(`DELETE FROM {w} WHERE (key, waiter_id) IN (SELECT key, waiter_id FROM {w} ` +
		`WHERE boot_id <> ?1 AND ?3 OR boot_id = ?1 AND expires_at <= ?2 LIMIT ?4)`)
	return s
}

// channelName is a NOTIFY channel: the prefix without its schema, and what
// it is for.
func channelName(prefix, what string) string {
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		prefix = prefix[i+1:]
	}
	return prefix + what
}

// DDL returns the statements that create the backend's tables (and on
// PostgreSQL its functions), for a migration tool; CreateTables runs them.
// They are idempotent (IF NOT EXISTS, CREATE OR REPLACE). On PostgreSQL
// they also bring the tables of an earlier release up to date. SQLite has
// no ADD COLUMN IF NOT EXISTS: CreateTables adds the two columns that an
// earlier release's table lacks, and a migration of such a table runs
//
//	ALTER TABLE <prefix>leases ADD COLUMN lock_delay_ns INTEGER NOT NULL DEFAULT 0
//	ALTER TABLE <prefix>leases ADD COLUMN delay_until INTEGER NOT NULL DEFAULT 0
//
// once, before these.
func (b *Backend) DDL() []string { return append([]string(nil), b.sql.ddl...) }

const pgTable = `CREATE TABLE IF NOT EXISTS {t} (
	key           BYTEA PRIMARY KEY,
	token         BIGINT NOT NULL,
	lease_id      TEXT NOT NULL,
	released      BOOLEAN NOT NULL,
	expires_at    TIMESTAMPTZ NOT NULL,
	ttl_ns        BIGINT NOT NULL,
	margin_ns     BIGINT NOT NULL,
	owner         TEXT NOT NULL DEFAULT '',
	lock_delay_ns BIGINT NOT NULL DEFAULT 0,
	delay_until   TIMESTAMPTZ NOT NULL DEFAULT '-infinity'
)`

// pgUpgrade adds the columns of lock delay to a table of an earlier
// release. It looks first, so that on an up-to-date table it takes no
// ACCESS EXCLUSIVE lock (which would wait for every open AdmitTx).
const pgUpgrade = `DO $do$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{t}'::regclass AND attname = 'delay_until' AND NOT attisdropped) THEN
		ALTER TABLE {t}
			ADD COLUMN IF NOT EXISTS lock_delay_ns BIGINT NOT NULL DEFAULT 0,
			ADD COLUMN IF NOT EXISTS delay_until TIMESTAMPTZ NOT NULL DEFAULT '-infinity';
	END IF;
END
$do$`

const pgWaiters = `CREATE TABLE IF NOT EXISTS {w} (
	key        BYTEA NOT NULL,
	waiter_id  TEXT NOT NULL,
	seq        BIGINT NOT NULL,
	expires_at TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (key, waiter_id)
)`

// Outcomes of the PostgreSQL functions, and of the SQLite code.
const (
	outGranted  = 0 // granted, renewed or released
	outSame     = 1 // a resent grant of the live lease: returned unchanged
	outHeld     = 2 // another lease is live
	outExpired  = 3 // the ID's lease expired
	outNotFound = 4 // not the key's most recent lease, or released
	outExhaust  = 5 // the key's counter (or the cluster's epoch) is at its largest
	outDelayed  = 6 // no lease is live, and a lock delay runs
)

// The functions lock the key's row (SELECT ... FOR UPDATE) and decide with
// clock_timestamp(), the server's clock when the row is locked, not now(),
// which is when the transaction began. Durations are rounded up to
// PostgreSQL's microseconds, so a lease or a lock delay never ends early.
const pgGrant = `CREATE OR REPLACE FUNCTION {p}grant(p_key BYTEA, p_id TEXT, p_ttl BIGINT, p_margin BIGINT, p_owner TEXT, p_delay BIGINT,
	OUT outcome INT, OUT token BIGINT, OUT expires_at TIMESTAMPTZ, OUT ttl_ns BIGINT, OUT margin_ns BIGINT, OUT remaining_us BIGINT)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	r {t}%ROWTYPE;
	n TIMESTAMPTZ;
	d INTERVAL := ((p_ttl + p_margin + 999) / 1000) * INTERVAL '1 microsecond';
	dd INTERVAL := ((p_delay + 999) / 1000) * INTERVAL '1 microsecond';
	ep BIGINT := {p}epoch();
	nt BIGINT;
BEGIN
	ttl_ns := p_ttl; margin_ns := p_margin;
	IF ep IS NULL THEN -- the cluster's epoch is past MaxEpoch
		outcome := 5; RETURN;
	END IF;
	PERFORM pg_advisory_xact_lock(hashtextextended('{t}:' || encode(p_key, 'hex'), 0));
	LOOP
		SELECT * INTO r FROM {t} AS l WHERE l.key = p_key FOR UPDATE;
		EXIT WHEN FOUND;
		n := clock_timestamp();
		INSERT INTO {t} AS l (key, token, lease_id, released, expires_at, ttl_ns, margin_ns, owner, lock_delay_ns, delay_until)
			VALUES (p_key, {p}next_token(0, ep), p_id, false, n + d, p_ttl, p_margin, p_owner, p_delay, n + d + dd)
			ON CONFLICT (key) DO NOTHING
			RETURNING l.token, l.expires_at INTO token, expires_at;
		IF FOUND THEN
			outcome := 0; RETURN;
		END IF;
	END LOOP;
	n := clock_timestamp();
	IF r.lease_id = p_id THEN
		IF r.released THEN
			outcome := 4;
		ELSIF r.expires_at <= n THEN
			outcome := 3;
		ELSE
			outcome := 1; token := r.token; expires_at := r.expires_at; ttl_ns := r.ttl_ns; margin_ns := r.margin_ns;
		END IF;
		RETURN;
	END IF;
	IF NOT r.released AND r.expires_at > n THEN
		outcome := 2;
		remaining_us := floor(extract(epoch FROM r.expires_at - n) * 1000000) + (r.lock_delay_ns + 999) / 1000;
		RETURN;
	END IF;
	IF r.delay_until > n THEN
		outcome := 6; remaining_us := ceil(extract(epoch FROM r.delay_until - n) * 1000000);
		RETURN;
	END IF;
	nt := {p}next_token(r.token, ep);
	IF nt IS NULL THEN
		outcome := 5; RETURN;
	END IF;
	UPDATE {t} AS l SET token = nt, lease_id = p_id, released = false, expires_at = n + d,
		ttl_ns = p_ttl, margin_ns = p_margin, owner = p_owner, lock_delay_ns = p_delay, delay_until = n + d + dd
		WHERE l.key = p_key;
	outcome := 0; token := nt; expires_at := n + d;
END
$fn$`

// pgGrantV1 is the grant function of the release before lock delay, with
// its five arguments, kept as a grant without a delay: processes of that
// release, still running while the tables are brought up to date, keep
// granting and see a lock delay as a held key.
const pgGrantV1 = `CREATE OR REPLACE FUNCTION {p}grant(p_key BYTEA, p_id TEXT, p_ttl BIGINT, p_margin BIGINT, p_owner TEXT,
	OUT outcome INT, OUT token BIGINT, OUT expires_at TIMESTAMPTZ, OUT ttl_ns BIGINT, OUT margin_ns BIGINT, OUT remaining_us BIGINT)
LANGUAGE sql AS $fn$
	SELECT CASE WHEN g.outcome = 6 THEN 2 ELSE g.outcome END, g.token, g.expires_at, g.ttl_ns, g.margin_ns, g.remaining_us
	FROM {p}grant(p_key, p_id, p_ttl, p_margin, p_owner, 0) AS g
$fn$`

const pgRenew = `CREATE OR REPLACE FUNCTION {p}renew(p_key BYTEA, p_id TEXT, p_ttl BIGINT, p_margin BIGINT,
	OUT outcome INT, OUT token BIGINT, OUT expires_at TIMESTAMPTZ)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	r {t}%ROWTYPE;
	n TIMESTAMPTZ;
	e TIMESTAMPTZ;
BEGIN
	PERFORM {p}epoch();
	PERFORM pg_advisory_xact_lock(hashtextextended('{t}:' || encode(p_key, 'hex'), 0));
	SELECT * INTO r FROM {t} AS l WHERE l.key = p_key FOR UPDATE;
	IF NOT FOUND OR r.lease_id <> p_id OR r.released THEN
		outcome := 4; RETURN;
	END IF;
	n := clock_timestamp();
	IF r.expires_at <= n THEN
		outcome := 3; RETURN;
	END IF;
	e := n + ((p_ttl + p_margin + 999) / 1000) * INTERVAL '1 microsecond';
	UPDATE {t} AS l SET expires_at = e, ttl_ns = p_ttl, margin_ns = p_margin,
		delay_until = e + ((r.lock_delay_ns + 999) / 1000) * INTERVAL '1 microsecond'
		WHERE l.key = p_key;
	outcome := 0; token := r.token; expires_at := e;
END
$fn$`

// Release and force_release notify in their own transaction: the waiter
// hears of the release when it commits. They notify only when a listener
// session may be listening (pgNobodyListens, pglisten.go). A release by the holder leaves no
// lock delay; a forced one starts the lease's from that moment.
const pgRelease = `CREATE OR REPLACE FUNCTION {p}release(p_key BYTEA, p_id TEXT) RETURNS INT
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	r {t}%ROWTYPE;
BEGIN
	PERFORM pg_advisory_xact_lock(hashtextextended('{t}:' || encode(p_key, 'hex'), 0));
	SELECT * INTO r FROM {t} AS l WHERE l.key = p_key FOR UPDATE;
	IF NOT FOUND OR r.lease_id <> p_id THEN
		RETURN 4;
	END IF;
	IF r.released THEN
		RETURN 0;
	END IF;
	IF r.expires_at <= clock_timestamp() THEN
		RETURN 3;
	END IF;
	UPDATE {t} AS l SET released = true, delay_until = '-infinity', expires_at = clock_timestamp() WHERE l.key = p_key;
	IF NOT {nobody_listens} THEN
		PERFORM pg_notify('{ch}', encode(p_key, 'hex'));
	END IF;
	RETURN 0;
END
$fn$`

const pgForceRelease = `CREATE OR REPLACE FUNCTION {p}force_release(p_key BYTEA) RETURNS BOOLEAN
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	n TIMESTAMPTZ;
BEGIN
	PERFORM pg_advisory_xact_lock(hashtextextended('{t}:' || encode(p_key, 'hex'), 0));
	n := clock_timestamp();
	UPDATE {t} AS l SET released = true, expires_at = n, delay_until = n + ((l.lock_delay_ns + 999) / 1000) * INTERVAL '1 microsecond'
		WHERE l.key = p_key AND NOT l.released AND l.expires_at > n;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	IF NOT {nobody_listens} THEN
		PERFORM pg_notify('{ch}', encode(p_key, 'hex'));
	END IF;
	RETURN true;
END
$fn$`

// The line's functions take a transaction-scoped advisory lock on the key
// (a hash of the table and the key: an unrelated lock that collides only
// waits), so that a join and a leave on one key are serialized: the leave
// sees every entry that joined before it and wakes the one behind it. The
// lock ends with the statement's transaction, so PgBouncer's transaction
// pooling keeps working.
const pgEnqueue = `CREATE OR REPLACE FUNCTION {p}enqueue(p_key BYTEA, p_id TEXT, p_ttl BIGINT,
	OUT ahead INT, OUT ahead_seq BIGINT, OUT ahead_remaining_us BIGINT)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	n TIMESTAMPTZ;
	e TIMESTAMPTZ;
	s BIGINT;
BEGIN
	PERFORM pg_advisory_xact_lock(hashtextextended('{w}:' || encode(p_key, 'hex'), 0));
	n := clock_timestamp();
	DELETE FROM {w} AS w WHERE w.key = p_key AND w.expires_at <= n;
	e := n + ((p_ttl + 999) / 1000) * INTERVAL '1 microsecond';
	UPDATE {w} AS w SET expires_at = e WHERE w.key = p_key AND w.waiter_id = p_id RETURNING w.seq INTO s;
	IF NOT FOUND THEN
		SELECT coalesce(max(w.seq), 0) + 1 INTO s FROM {w} AS w WHERE w.key = p_key;
		INSERT INTO {w} (key, waiter_id, seq, expires_at) VALUES (p_key, p_id, s, e);
	END IF;
	SELECT count(*) INTO ahead FROM {w} AS w WHERE w.key = p_key AND w.seq < s;
	SELECT w.seq, floor(extract(epoch FROM w.expires_at - n) * 1000000) INTO ahead_seq, ahead_remaining_us
		FROM {w} AS w WHERE w.key = p_key AND w.seq < s ORDER BY w.seq DESC LIMIT 1;
END
$fn$`

// pgDequeue drops the key's expired entries, removes the waiter's and
// returns the tag (turnTag) of the live entry now directly behind it, which
// it notifies; NULL when there is none.
const pgDequeue = `CREATE OR REPLACE FUNCTION {p}dequeue(p_key BYTEA, p_id TEXT) RETURNS TEXT
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	s BIGINT;
	nxt TEXT;
BEGIN
	PERFORM pg_advisory_xact_lock(hashtextextended('{w}:' || encode(p_key, 'hex'), 0));
	DELETE FROM {w} AS w WHERE w.key = p_key AND w.expires_at <= clock_timestamp() AND w.waiter_id <> p_id;
	DELETE FROM {w} AS w WHERE w.key = p_key AND w.waiter_id = p_id RETURNING w.seq INTO s;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	SELECT w.waiter_id INTO nxt FROM {w} AS w
		WHERE w.key = p_key AND w.seq > s AND w.expires_at > clock_timestamp() ORDER BY w.seq LIMIT 1;
	IF nxt IS NULL THEN
		RETURN NULL;
	END IF;
	nxt := left(encode(sha256(convert_to(nxt, 'UTF8')), 'hex'), 32);
	IF NOT {nobody_listens} THEN
		PERFORM pg_notify('{tch}', encode(p_key, 'hex') || ':' || nxt);
	END IF;
	RETURN nxt;
END
$fn$`

const sqliteTable = `CREATE TABLE IF NOT EXISTS {t} (
	key           BLOB PRIMARY KEY,
	token         INTEGER NOT NULL,
	lease_id      TEXT NOT NULL,
	released      INTEGER NOT NULL,
	boot_id       TEXT NOT NULL,
	expires_at    INTEGER NOT NULL,
	ttl_ns        INTEGER NOT NULL,
	margin_ns     INTEGER NOT NULL,
	owner         TEXT NOT NULL DEFAULT '',
	lock_delay_ns INTEGER NOT NULL DEFAULT 0,
	delay_until   INTEGER NOT NULL DEFAULT 0
)`

const sqliteWaiters = `CREATE TABLE IF NOT EXISTS {w} (
	key        BLOB NOT NULL,
	waiter_id  TEXT NOT NULL,
	seq        INTEGER NOT NULL,
	boot_id    TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (key, waiter_id)
) WITHOUT ROWID`
