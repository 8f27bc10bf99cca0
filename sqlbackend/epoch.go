package sqlbackend

import (
	"context"
	"fmt"
)

// Epochs (PostgreSQL). A token is epoch<<EpochShift | counter: the
// counter, in the low EpochShift bits, counts the key's grants; the epoch,
// in the 19 bits above, is the cluster's epoch base plus its WAL timeline
// when the token was granted. Every promotion of a standby and every
// point-in-time recovery starts a new, higher timeline, so a promoted
// standby's tokens outrank every token of the primary it replaced, even
// the grants it never received (asynchronous replication). Tokens stay
// integers that strictly increase per key; guards compare them as before.
//
// The epoch is read inside the granting statement from
// pg_walfile_name(pg_current_wal_lsn()): the timeline the server writes
// WAL on, which a promoted server switches to at promotion, before its
// first checkpoint (pg_control_checkpoint() would lag until then).

// EpochShift is the bit position of a PostgreSQL token's epoch: a token is
// epoch<<EpochShift | counter.
const EpochShift = 44

// MaxEpoch is the largest epoch a PostgreSQL token can carry. A grant on a
// cluster whose epoch (its epoch base plus its timeline) exceeds it, or
// whose key counter would overflow EpochShift bits, returns
// backend.ErrTokenSpaceExhausted.
const MaxEpoch = 1<<(63-EpochShift) - 1

// TokenEpoch splits a PostgreSQL token into its epoch and its counter.
func TokenEpoch(token uint64) (epoch uint32, counter uint64) {
	return uint32(token >> EpochShift), token & (1<<EpochShift - 1)
}

// The SQLSTATEs the PostgreSQL functions raise when a check of the
// session fails. They are errors, not outcomes, so that a process of an
// earlier release, which knows only the outcomes of its time, fails too.
const (
	stateStandby     = "FNC01" // the server is in recovery (a standby)
	stateAsyncCommit = "FNC02" // the session's synchronous_commit is off
	stateCluster     = "FNC03" // the tables belong to another cluster
	stateUnlogged    = "FNC04" // the lease table is UNLOGGED
)

// pgEpoch is run first by every grant and renewal: it refuses a standby,
// a session with synchronous_commit off, an unlogged lease table and
// tables of another cluster (cluster.go), raising one of the SQLSTATEs
// above, and returns the epoch a grant mints its token in (NULL past
// MaxEpoch). The server's system identifier is read once per session
// (pg_control_system() reads the control file) and kept in a session
// setting; the cluster row is read every time, since the tables can be
// replaced under a running session.
const pgEpoch = `CREATE OR REPLACE FUNCTION {p}epoch() RETURNS BIGINT
LANGUAGE plpgsql AS $fn$
DECLARE
	sysid TEXT := current_setting('fencing.system_identifier', true);
	c {c}%ROWTYPE;
	e BIGINT;
BEGIN
	IF pg_is_in_recovery() THEN
		RAISE EXCEPTION 'fencing: the server is a standby (in recovery): a standby cannot grant' USING ERRCODE = 'FNC01';
	END IF;
	IF current_setting('synchronous_commit') = 'off' THEN
		RAISE EXCEPTION 'fencing: the session''s synchronous_commit is off: a crash could lose a grant, and reissue its token' USING ERRCODE = 'FNC02';
	END IF;
	IF (SELECT relpersistence FROM pg_class WHERE oid = '{t}'::regclass) = 'u' THEN
		RAISE EXCEPTION 'fencing: {t} is UNLOGGED: a crash empties it, and its counters start again' USING ERRCODE = 'FNC04';
	END IF;
	IF sysid IS NULL OR sysid = '' THEN
		SELECT system_identifier::text INTO sysid FROM pg_control_system();
		PERFORM set_config('fencing.system_identifier', sysid, false);
	END IF;
	SELECT * INTO c FROM {c} LIMIT 1;
	IF NOT FOUND OR c.system_identifier::text <> sysid THEN
		RAISE EXCEPTION 'fencing: the tables were made on another cluster (system identifier %, this is %): adopt them with SELECT {p}adopt_cluster()',
			coalesce(c.system_identifier::text, 'none'), sysid USING ERRCODE = 'FNC03';
	END IF;
	e := c.epoch_base + ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
	IF e > 524287 THEN
		RETURN NULL;
	END IF;
	RETURN e;
END
$fn$`

// pgNextToken is the token a grant mints after prev in epoch e: the next
// counter in the later of e and prev's epoch (so tokens only go up, also
// for a table whose tokens came from a higher epoch), NULL when the
// counter would overflow. A prev of 0 (a key with no row) is the floor
// (records.go), read in a snapshot of its own: the function is VOLATILE,
// so a grant that waited for a reclamation's lock on the key sees the floor
// that reclamation raised, not the one of its statement's snapshot. The
// floor carries its epoch, so a key's first token after a reclamation is in
// the later of the two epochs too, and a promoted standby's (a later
// timeline, a higher e) outranks it.
const pgNextToken = `CREATE OR REPLACE FUNCTION {p}next_token(prev BIGINT, e BIGINT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	IF prev = 0 THEN
		SELECT coalesce(max(l.token), 0) INTO prev FROM {t} AS l WHERE l.key = ''::bytea;
	END IF;
	IF prev & 17592186044415 = 17592186044415 THEN
		RETURN NULL;
	END IF;
	RETURN (greatest(prev >> 44, e) << 44) | ((prev & 17592186044415) + 1);
END
$fn$`

// refusal returns the error of a SQLSTATE that pgEpoch raises, or nil for
// any other.
func (b *Backend) refusal(ctx context.Context, what, state string) error {
	switch state {
	case stateStandby:
		return fmt.Errorf("sqlbackend: %s: %w", what, &SafetyError{Setting: "pg_is_in_recovery()", Value: "true",
			Fix: "connect to the primary, not a standby (target_session_attrs=read-write or primary in a multi-host connection string, not a reader endpoint)"})
	case stateAsyncCommit:
		return fmt.Errorf("sqlbackend: %s: %w", what, &SafetyError{Setting: "synchronous_commit", Value: "off",
			Fix: "do not turn synchronous_commit off for the backend's sessions (SET, ALTER ROLE/DATABASE ... SET, a pooler's connect_query); on, local, remote_write or remote_apply keep a grant"})
	case stateUnlogged:
		return fmt.Errorf("sqlbackend: %s: %w", what, &SafetyError{Setting: "persistence of " + b.sql.table, Value: "UNLOGGED",
			Fix: "ALTER TABLE " + b.sql.table + " SET LOGGED (an unlogged table is emptied by a crash, and its counters start again)"})
	case stateCluster:
		return b.clusterError(ctx, what)
	}
	return nil
}
