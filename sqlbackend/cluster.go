package sqlbackend

import (
	"context"
	"errors"
	"fmt"
)

// ErrClusterChanged is wrapped by every *ClusterError.
var ErrClusterChanged = errors.New("sqlbackend: the lease tables were made on another PostgreSQL cluster")

// ClusterError is returned by Grant and Renew on PostgreSQL when the
// backend's tables were made on another cluster than the one serving them:
// they were copied (pg_dump and pg_restore, logical replication, a
// pg_upgrade into a new cluster), and the new cluster's timelines say
// nothing about the old one's, so its tokens could repeat tokens the old
// cluster granted after the copy. The backend refuses to grant or renew
// until an operator, having stopped every grant on the old cluster,
// adopts the tables with Backend.AdoptCluster or
// SELECT <prefix>adopt_cluster() (see docs/sql.md). errors.Is(err,
// ErrClusterChanged) reports true for it.
type ClusterError struct {
	Recorded uint64 // the system identifier the tables record (0: none)
	Current  uint64 // the serving cluster's system identifier
}

func (e *ClusterError) Error() string {
	return fmt.Sprintf("%v: they record system identifier %d, the server is %d; stop granting on the old cluster, then adopt the tables "+
		"(Backend.AdoptCluster, or SELECT <prefix>adopt_cluster())", ErrClusterChanged, e.Recorded, e.Current)
}

// Unwrap returns ErrClusterChanged.
func (e *ClusterError) Unwrap() error { return ErrClusterChanged }

// AdoptCluster makes the serving PostgreSQL cluster the owner of the
// backend's tables after a copy (see ClusterError): it records the
// cluster's system identifier and raises the epoch so that every token
// granted from now on outranks every token the tables hold. It returns
// the epoch the next grants mint their tokens in. Run it once, after the
// old cluster has stopped granting; it is the same as
// SELECT <prefix>adopt_cluster().
func (b *Backend) AdoptCluster(ctx context.Context) (epoch uint32, err error) {
	if err := b.ready(ctx, nil); err != nil {
		return 0, err
	}
	if _, ok := b.dialect.(*postgres); !ok {
		return 0, fmt.Errorf("sqlbackend: adopt cluster: %w (PostgreSQL only)", errors.ErrUnsupported)
	}
	var e int64
	if err := b.db.QueryRowContext(ctx, b.sql.adopt).Scan(&e); err != nil {
		return 0, b.classify(ctx, "adopt cluster", err)
	}
	return uint32(e), nil
}

// clusterError reads the system identifiers behind an outCluster outcome.
func (b *Backend) clusterError(ctx context.Context, what string) error {
	var recorded, current int64
	err := b.db.QueryRowContext(ctx, b.sql.clusterIDs).Scan(&recorded, &current)
	if err != nil {
		return fmt.Errorf("sqlbackend: %s: %w (reading the system identifiers: %w)", what, ErrClusterChanged, err)
	}
	return fmt.Errorf("sqlbackend: %s: %w", what, &ClusterError{Recorded: uint64(recorded), Current: uint64(current)})
}

// pgCluster is the one-row table naming the cluster the tables belong to,
// filled when it is made: the system identifier, and the epoch base (the
// epoch of a token is the base plus the timeline it was granted on). A
// table of an earlier release gets a base above its tokens' epochs.
const pgCluster = `CREATE TABLE IF NOT EXISTS {c} (
	one               BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
	system_identifier BIGINT NOT NULL,
	epoch_base        BIGINT NOT NULL,
	adopted_at        TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
)`

const pgClusterRow = `INSERT INTO {c} (system_identifier, epoch_base)
	SELECT s.system_identifier, coalesce((SELECT max(l.token >> 44) FROM {t} AS l), 0) FROM pg_control_system() AS s
	WHERE NOT EXISTS (SELECT 1 FROM {c})
	ON CONFLICT DO NOTHING`

// pgAdopt records the serving cluster and a base that puts the current
// timeline's epoch above every token's epoch in the table. The lease
// table is locked against grants meanwhile.
const pgAdopt = `CREATE OR REPLACE FUNCTION {p}adopt_cluster() RETURNS BIGINT
LANGUAGE plpgsql AS $fn$
DECLARE
	tl BIGINT;
	top BIGINT;
	base BIGINT;
BEGIN
	IF pg_is_in_recovery() THEN
		RAISE EXCEPTION '{p}adopt_cluster: the server is a standby; adopt on the primary' USING ERRCODE = '25006';
	END IF;
	LOCK TABLE {t} IN SHARE MODE;
	LOCK TABLE {c} IN EXCLUSIVE MODE;
	tl := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
	SELECT coalesce(max(l.token >> 44), 0) INTO top FROM {t} AS l;
	base := greatest(top + 1 - tl, 0);
	DELETE FROM {c};
	INSERT INTO {c} (system_identifier, epoch_base) SELECT s.system_identifier, base FROM pg_control_system() AS s;
	RETURN base + tl;
END
$fn$`
