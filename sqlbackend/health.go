package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Health is the state of a PostgreSQL backend's tables that decides how
// fast they stay (see docs/sql.md, "A lease table that stays fast"):
// their dead row versions, how many of their updates were HOT, and what
// holds back the xmin horizon, below which vacuum can remove nothing.
type Health struct {
	Leases  TableHealth // the lease table
	Waiters TableHealth // the waiters table (Queuer)
	// Horizon is the oldest transaction, snapshot or replication slot
	// holding back the horizon, if any holds one. Sessions of other
	// roles are seen only by a role with pg_read_all_stats (pg_monitor).
	Horizon *HorizonHolder
}

// TableHealth is one table's statistics (pg_stat_user_tables), as the
// statistics collector last reported them.
type TableHealth struct {
	Table          string
	LiveRows       int64     // estimated live rows
	DeadRows       int64     // row versions dead but not yet vacuumed
	Updates        int64     // rows updated since the statistics were reset
	HOTUpdates     int64     // of Updates, those that were heap-only (no index entry)
	LastAutovacuum time.Time // zero: never
}

// HOTRatio is HOTUpdates / Updates, 1 with no updates: how many updates
// found room on their row's page. A ratio that falls means the pages are
// full of versions vacuum cannot remove yet.
func (t TableHealth) HOTRatio() float64 {
	if t.Updates == 0 {
		return 1
	}
	return float64(t.HOTUpdates) / float64(t.Updates)
}

// HorizonHolder is what holds back the xmin horizon.
type HorizonHolder struct {
	Holder string        // e.g. "session 1234 (idle in transaction)", "replication slot s1", "prepared transaction g1"
	XIDAge int64         // transactions begun since its xmin
	Age    time.Duration // since its transaction began (0 for a replication slot)
}

// Health reads the tables' statistics and the horizon, on PostgreSQL (on
// SQLite it returns an error wrapping errors.ErrUnsupported). It is a few
// reads of statistics views, for a health endpoint or a metric
// (RegisterHealthMetrics), not for every request.
func (b *Backend) Health(ctx context.Context) (Health, error) {
	if err := b.ready(ctx, nil); err != nil {
		return Health{}, err
	}
	if _, ok := b.dialect.(*postgres); !ok {
		return Health{}, fmt.Errorf("sqlbackend: health: %w (PostgreSQL only)", errors.ErrUnsupported)
	}
	var h Health
	for _, t := range []struct {
		name string
		into *TableHealth
	}{{b.sql.table, &h.Leases}, {b.sql.waiters, &h.Waiters}} {
		var vacuumed sql.NullTime
		t.into.Table = t.name
		err := b.db.QueryRowContext(ctx, `SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, greatest(last_autovacuum, last_vacuum) `+
			`FROM pg_stat_user_tables WHERE relid = to_regclass($1)`, t.name).
			Scan(&t.into.LiveRows, &t.into.DeadRows, &t.into.Updates, &t.into.HOTUpdates, &vacuumed)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return Health{}, fmt.Errorf("sqlbackend: health: %w", ErrNoTables)
		case err != nil:
			return Health{}, b.classify(ctx, "health", err)
		}
		t.into.LastAutovacuum = vacuumed.Time
	}
	var holder HorizonHolder
	var secs sql.NullFloat64
	err := b.db.QueryRowContext(ctx, pgHorizon).Scan(&holder.Holder, &holder.XIDAge, &secs)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return Health{}, b.classify(ctx, "health", err)
	default:
		holder.Age = time.Duration(secs.Float64 * float64(time.Second))
		h.Horizon = &holder
	}
	return h, nil
}

// pgHorizon finds the oldest xmin among other sessions, replication slots
// and prepared transactions.
const pgHorizon = `SELECT holder, xid_age, secs FROM (
	SELECT 'session ' || pid || ' (' || coalesce(state, backend_type) || ')' AS holder, age(backend_xmin) AS xid_age,
		extract(epoch FROM clock_timestamp() - xact_start)::float8 AS secs
		FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
	UNION ALL
	SELECT 'replication slot ' || slot_name, greatest(age(xmin), age(catalog_xmin)), NULL
		FROM pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
	UNION ALL
	SELECT 'prepared transaction ' || gid, age(transaction), extract(epoch FROM clock_timestamp() - prepared)::float8
		FROM pg_prepared_xacts
) AS h ORDER BY xid_age DESC, secs DESC NULLS LAST LIMIT 1`

// Health metrics, observed by RegisterHealthMetrics.
const (
	// MetricDeadRows is a gauge of a table's dead row versions, by
	// fencing.table.
	MetricDeadRows = "fencing.sql.dead_rows"
	// MetricHOTRatio is a gauge of the share of a table's updates that
	// were HOT (0 to 1), by fencing.table.
	MetricHOTRatio = "fencing.sql.hot_update_ratio"
	// MetricHorizonAge is a gauge (seconds) of how long the transaction
	// holding back the xmin horizon has run (0 when none does).
	MetricHorizonAge = "fencing.sql.horizon.age"
	// MetricHorizonXIDAge is a gauge of the transactions begun since the
	// horizon's xmin (0 when none holds it).
	MetricHorizonXIDAge = "fencing.sql.horizon.xid_age"
)

// RegisterHealthMetrics registers gauges of b's Health on mp's meter
// "github.com/fencing-go/fencing/sqlbackend", read (with one Health
// call) each time the provider collects. Unregister the returned
// registration before closing b.
func RegisterHealthMetrics(mp metric.MeterProvider, b *Backend) (metric.Registration, error) {
	m := mp.Meter("github.com/fencing-go/fencing/sqlbackend")
	dead, err1 := m.Int64ObservableGauge(MetricDeadRows, metric.WithUnit("{row}"), metric.WithDescription("dead row versions of the backend's tables"))
	hot, err2 := m.Float64ObservableGauge(MetricHOTRatio, metric.WithUnit("1"), metric.WithDescription("share of the table's updates that were HOT"))
	age, err3 := m.Float64ObservableGauge(MetricHorizonAge, metric.WithUnit("s"), metric.WithDescription("age of the transaction holding back the xmin horizon"))
	xids, err4 := m.Int64ObservableGauge(MetricHorizonXIDAge, metric.WithUnit("{transaction}"), metric.WithDescription("transactions since the horizon's xmin"))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("sqlbackend: health metrics: %w", err)
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		h, err := b.Health(ctx)
		if err != nil {
			return err
		}
		for _, t := range []TableHealth{h.Leases, h.Waiters} {
			attrs := metric.WithAttributes(attribute.String("fencing.table", t.Table))
			o.ObserveInt64(dead, t.DeadRows, attrs)
			o.ObserveFloat64(hot, t.HOTRatio(), attrs)
		}
		var holder HorizonHolder
		if h.Horizon != nil {
			holder = *h.Horizon
		}
		o.ObserveFloat64(age, holder.Age.Seconds())
		o.ObserveInt64(xids, holder.XIDAge)
		return nil
	}, dead, hot, age, xids)
}
