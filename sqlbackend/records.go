package sqlbackend

import (
	"regexp"
	"strings"
)

// Storage layout. One table, <prefix>leases, holds one row per key that was
// ever leased; the row is never deleted, because its token column is the
// key's token counter and must outlive every lease:
//
//	key        the key's bytes (BYTEA / BLOB), the primary key
//	token      the highest token ever minted on the key (BIGINT / INTEGER)
//	lease_id   the most recent lease's ID
//	released   whether that lease was released (or force-released)
//	expires_at when it ends: a TIMESTAMPTZ on the PostgreSQL server's clock;
//	           on SQLite nanoseconds since boot on the host's boot clock,
//	           with boot_id naming the boot (see HostClock)
//	ttl_ns     the lease's timeout and margin as granted, in nanoseconds,
//	margin_ns  so that a resent grant returns the lease unchanged
//	owner      the holder's public name ('' when none is given)
//
// A lease is live when it is not released and expires_at is later than the
// coordinator's clock. On PostgreSQL the operations are PL/pgSQL functions
// (<prefix>grant, <prefix>renew, <prefix>release, <prefix>force_release), so
// each is one statement, one round trip and one transaction; on SQLite they
// are short BEGIN IMMEDIATE transactions on one connection of the caller's
// pool.

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

	// PostgreSQL: one statement per operation.
	grant, renew, release, forceRelease string
	// Both dialects.
	token, inspect, list, admit, liveTokens string

	// SQLite: the rows the Go code reads and writes inside BEGIN IMMEDIATE.
	read, insert, update, touch string
	notifyChannel               string // PostgreSQL's NOTIFY channel
	table                       string
}

func newStatements(d Dialect, prefix string) statements {
	t := prefix + "leases"
	s := statements{table: t}
	r := strings.NewReplacer("{t}", t, "{p}", prefix, "{ch}", channelName(prefix))
	if d == Postgres {
		s.notifyChannel = channelName(prefix)
		s.ddl = []string{r.Replace(pgTable), r.Replace(pgGrant), r.Replace(pgRenew), r.Replace(pgRelease), r.Replace(pgForceRelease)}
		s.grant = r.Replace(`SELECT outcome, token, expires_at, ttl_ns, margin_ns, remaining_us FROM {p}grant($1, $2, $3, $4, $5)`)
		s.renew = r.Replace(`SELECT outcome, token, expires_at FROM {p}renew($1, $2, $3, $4)`)
		s.release = r.Replace(`SELECT {p}release($1, $2)`)
		s.forceRelease = r.Replace(`SELECT {p}force_release($1)`)
		s.token = r.Replace(`SELECT token FROM {t} WHERE key = $1 AND NOT released AND expires_at > clock_timestamp()`)
		s.inspect = r.Replace(`SELECT key, token, NOT released AND expires_at > n, expires_at, ` +
			`(extract(epoch FROM expires_at - n) * 1000000)::bigint, owner ` +
			`FROM (SELECT *, clock_timestamp() AS n FROM {t} WHERE key = $1) AS l`)
		s.list = r.Replace(`SELECT key, token, NOT released AND expires_at > n, expires_at, ` +
			`(extract(epoch FROM expires_at - n) * 1000000)::bigint, owner ` +
			`FROM (SELECT *, clock_timestamp() AS n FROM {t} WHERE ($1 = 0 OR key > $2) AND ($3 = 0 OR substring(key FROM 1 FOR $3) = $4) ORDER BY key LIMIT $5) AS l ORDER BY key`)
		s.liveTokens = r.Replace(`SELECT key, token FROM {t} WHERE key = ANY($1) AND NOT released AND expires_at > clock_timestamp()`)
		s.admit = r.Replace(`SELECT token FROM {t} WHERE key = $1 AND NOT released AND expires_at > clock_timestamp() FOR SHARE`)
		return s
	}
	s.ddl = []string{r.Replace(sqliteTable)}
	s.read = r.Replace(`SELECT token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns, owner FROM {t} WHERE key = ?`)
	s.insert = r.Replace(`INSERT INTO {t} (key, token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns, owner) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?)`)
	s.update = r.Replace(`UPDATE {t} SET token = ?, lease_id = ?, released = ?, boot_id = ?, expires_at = ?, ttl_ns = ?, margin_ns = ?, owner = ? WHERE key = ?`)
	s.list = r.Replace(`SELECT key, token, lease_id, released, boot_id, expires_at, ttl_ns, margin_ns, owner FROM {t} WHERE (?1 = 0 OR key > ?2) AND (?3 = 0 OR substr(key, 1, ?3) = ?4) ORDER BY key LIMIT ?5`)
	// A write that changes nothing: it takes the database's write lock in
	// the caller's transaction (AdmitTx).
	s.touch = r.Replace(`UPDATE {t} SET token = token WHERE key = ?`)
	return s
}

// channelName is the NOTIFY channel: the prefix without its schema.
func channelName(prefix string) string {
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		prefix = prefix[i+1:]
	}
	return prefix + "free"
}

// DDL returns the statements that create the backend's table (and on
// PostgreSQL its functions), for a migration tool; CreateTables runs them.
// They are idempotent (IF NOT EXISTS, CREATE OR REPLACE).
func (b *Backend) DDL() []string { return append([]string(nil), b.sql.ddl...) }

const pgTable = `CREATE TABLE IF NOT EXISTS {t} (
	key        BYTEA PRIMARY KEY,
	token      BIGINT NOT NULL,
	lease_id   TEXT NOT NULL,
	released   BOOLEAN NOT NULL,
	expires_at TIMESTAMPTZ NOT NULL,
	ttl_ns     BIGINT NOT NULL,
	margin_ns  BIGINT NOT NULL,
	owner      TEXT NOT NULL DEFAULT ''
)`

// Outcomes of the PostgreSQL functions, and of the SQLite code.
const (
	outGranted  = 0 // granted, renewed or released
	outSame     = 1 // a resent grant of the live lease: returned unchanged
	outHeld     = 2 // another lease is live
	outExpired  = 3 // the ID's lease expired
	outNotFound = 4 // not the key's most recent lease, or released
	outExhaust  = 5 // the token counter is at math.MaxInt64
)

// The functions lock the key's row (SELECT ... FOR UPDATE) and decide with
// clock_timestamp(), the server's clock when the row is locked, not now(),
// which is when the transaction began. Durations are rounded up to
// PostgreSQL's microseconds, so a lease never ends early.
const pgGrant = `CREATE OR REPLACE FUNCTION {p}grant(p_key BYTEA, p_id TEXT, p_ttl BIGINT, p_margin BIGINT, p_owner TEXT,
	OUT outcome INT, OUT token BIGINT, OUT expires_at TIMESTAMPTZ, OUT ttl_ns BIGINT, OUT margin_ns BIGINT, OUT remaining_us BIGINT)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	r {t}%ROWTYPE;
	n TIMESTAMPTZ;
	d INTERVAL := ((p_ttl + p_margin + 999) / 1000) * INTERVAL '1 microsecond';
BEGIN
	ttl_ns := p_ttl; margin_ns := p_margin;
	LOOP
		SELECT * INTO r FROM {t} AS l WHERE l.key = p_key FOR UPDATE;
		EXIT WHEN FOUND;
		n := clock_timestamp();
		INSERT INTO {t} AS l (key, token, lease_id, released, expires_at, ttl_ns, margin_ns, owner)
			VALUES (p_key, 1, p_id, false, n + d, p_ttl, p_margin, p_owner)
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
		outcome := 2; remaining_us := floor(extract(epoch FROM r.expires_at - n) * 1000000);
		RETURN;
	END IF;
	IF r.token >= 9223372036854775807 THEN
		outcome := 5; RETURN;
	END IF;
	UPDATE {t} AS l SET token = r.token + 1, lease_id = p_id, released = false, expires_at = n + d,
		ttl_ns = p_ttl, margin_ns = p_margin, owner = p_owner
		WHERE l.key = p_key;
	outcome := 0; token := r.token + 1; expires_at := n + d;
END
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
	SELECT * INTO r FROM {t} AS l WHERE l.key = p_key FOR UPDATE;
	IF NOT FOUND OR r.lease_id <> p_id OR r.released THEN
		outcome := 4; RETURN;
	END IF;
	n := clock_timestamp();
	IF r.expires_at <= n THEN
		outcome := 3; RETURN;
	END IF;
	e := n + ((p_ttl + p_margin + 999) / 1000) * INTERVAL '1 microsecond';
	UPDATE {t} AS l SET expires_at = e, ttl_ns = p_ttl, margin_ns = p_margin WHERE l.key = p_key;
	outcome := 0; token := r.token; expires_at := e;
END
$fn$`

// Release and force_release notify in their own transaction: the waiter
// hears of the release when it commits.
const pgRelease = `CREATE OR REPLACE FUNCTION {p}release(p_key BYTEA, p_id TEXT) RETURNS INT
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	r {t}%ROWTYPE;
BEGIN
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
	UPDATE {t} AS l SET released = true WHERE l.key = p_key;
	PERFORM pg_notify('{ch}', encode(p_key, 'hex'));
	RETURN 0;
END
$fn$`

const pgForceRelease = `CREATE OR REPLACE FUNCTION {p}force_release(p_key BYTEA) RETURNS BOOLEAN
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
	UPDATE {t} AS l SET released = true
		WHERE l.key = p_key AND NOT l.released AND l.expires_at > clock_timestamp();
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM pg_notify('{ch}', encode(p_key, 'hex'));
	RETURN true;
END
$fn$`

const sqliteTable = `CREATE TABLE IF NOT EXISTS {t} (
	key        BLOB PRIMARY KEY,
	token      INTEGER NOT NULL,
	lease_id   TEXT NOT NULL,
	released   INTEGER NOT NULL,
	boot_id    TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	ttl_ns     INTEGER NOT NULL,
	margin_ns  INTEGER NOT NULL,
	owner      TEXT NOT NULL DEFAULT ''
)`
