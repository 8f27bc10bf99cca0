package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// pgPairsDB is the database the contenders of TestPGPairCounts work in; the
// test reads the cluster's statistics from the postgres database, so that
// its own statements and commits are not counted.
const pgPairsDB = "pairs"

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: 100 on every Linux architecture Go runs on.
const clockTicks = 100

// pgPairCounts is what a contender's pairs cost the server, in total.
type pgPairCounts struct {
	name       string
	pairs      int
	statements int64   // pg_stat_statements calls, in the pairs database
	commits    int64   // pg_stat_database.xact_commit
	walRecords int64   // pg_stat_wal
	walBytes   float64 // pg_stat_wal
	walFPI     int64   // pg_stat_wal
	upd, hot   int64   // pg_stat_user_tables, the contender's tables
	cpuTicks   int64   // utime+stime of the database's backends
	top        []pgStatement
}

// pgStatement is one statement kind of pg_stat_statements.
type pgStatement struct {
	query  string
	calls  int64
	execMS float64
}

// pgSnapshot is one reading of the counters pgPairCounts takes differences
// of.
type pgSnapshot struct {
	commits, walRecords, walFPI int64
	walBytes                    float64
	statements                  map[int64]pgStatement // by queryid
}

// TestPGPairCounts measures what one Grant+Release pair costs a durable
// PostgreSQL server (fsync on), for the SQL backend and the two fenced
// leases of report_sql_test.go written without it (rowLease, tableLease):
// statements, commits, WAL, HOT updates, server execution time by statement
// and the backends' CPU. One goroutine, one key, BENCH_PGCOUNTS pairs each;
// in CI it runs 50 pairs without the variable. It asserts only what holds
// under any load: every contender completed its pairs, and ours commits
// twice and runs at most two statements a pair (the common case: the key
// is free, the lease is the caller's).
func TestPGPairCounts(t *testing.T) {
	n := envInt(t, "BENCH_PGCOUNTS", 0)
	if n == 0 {
		if os.Getenv("CI") == "" {
			t.Skip("set BENCH_PGCOUNTS=N (pairs per contender) to run: cd bench && BENCH_PGCOUNTS=2000 go test -run '^TestPGPairCounts$' -v -count=1 .")
		}
		n = 50 // CI: a short run, that still checks the counts
	}
	ctx := context.Background()
	srv := pgtest.StartConfig(t, pgtest.Config{Durable: true, Settings: []string{
		"shared_preload_libraries=pg_stat_statements,auto_explain", // auto_explain: BENCH_PGEXPLAIN
		"autovacuum=off", // no autovacuum commits or WAL in the counts
	}})
	admin := srv.DB(t)
	admin.SetMaxOpenConns(1)
	// The session reports its WAL (CREATE DATABASE copies template1 into
	// it) at once, not during a contender's run (see flushStats).
	for _, q := range []string{"CREATE EXTENSION pg_stat_statements", "CREATE DATABASE " + pgPairsDB, "SELECT pg_stat_force_next_flush()"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dsn := strings.Replace(srv.DSN(), "/postgres?", "/"+pgPairsDB+"?", 1)
	db := poolOf64(t, "pgx", dsn)
	// tables reads pg_stat_user_tables, which only a session of the pairs
	// database sees; its pid is left out of the CPU sums.
	tables := poolOf64(t, "pgx", dsn)
	tables.SetMaxOpenConns(1)
	var tablesPID int
	if err := tables.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&tablesPID); err != nil {
		t.Fatal(err)
	}
	coord := sqlCoordinatorPrefix(t, db, sqlbackend.Postgres, "pairs_")
	for _, ddl := range []string{
		`CREATE TABLE peer_locks (name TEXT PRIMARY KEY, owner TEXT, rvn BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)`,
		`CREATE TABLE row_leases (name TEXT PRIMARY KEY, token BIGINT NOT NULL, holder TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	contenders := []struct {
		name   string
		tables string // LIKE pattern of the contender's tables
		pair   func(i int) error
	}{
		{"ours", `pairs\_%`, func(int) error {
			l, err := coord.Grant(ctx, "k", leaseTTL)
			if err != nil {
				return err
			}
			return coord.Release(ctx, "k", l.ID)
		}},
		{"row lease", "row_leases", func(i int) error { return rowLease(ctx, db, "k", strconv.Itoa(i)) }},
		{"table lease (pglock)", "peer_locks", func(i int) error { return tableLease(ctx, db, "k", strconv.Itoa(i)) }},
	}
	var results []pgPairCounts
	for _, c := range contenders {
		for i := range 20 { // the row exists, the session is open: the common case
			if err := c.pair(-1 - i); err != nil {
				t.Fatalf("%s: warm-up pair: %v", c.name, err)
			}
		}
		r := pgPairCounts{name: c.name}
		flushStats(t, db)
		upd0, hot0 := tableUpdates(t, tables, c.tables)
		before := settledSnapshot(t, admin)
		cpu0 := backendTicks(t, admin, tablesPID)
		for i := range n {
			if err := c.pair(i); err != nil {
				t.Fatalf("%s: pair %d: %v", c.name, i, err)
			}
			r.pairs++
		}
		cpu1 := backendTicks(t, admin, tablesPID)
		flushed := flushStats(t, db)
		after := settledSnapshot(t, admin)
		upd1, hot1 := tableUpdates(t, tables, c.tables)
		for pid, ticks := range cpu1 {
			r.cpuTicks += ticks - cpu0[pid] // a backend new since: from 0
		}
		r.commits = after.commits - before.commits - int64(flushed) // flushStats's own
		r.walRecords = after.walRecords - before.walRecords
		r.walBytes = after.walBytes - before.walBytes
		r.walFPI = after.walFPI - before.walFPI
		r.upd, r.hot = upd1-upd0, hot1-hot0
		for id, s := range after.statements {
			d := pgStatement{query: s.query, calls: s.calls - before.statements[id].calls, execMS: s.execMS - before.statements[id].execMS}
			if d.calls > 0 && !strings.Contains(s.query, "pg_stat_force_next_flush") {
				r.statements += d.calls
				r.top = append(r.top, d)
			}
		}
		sort.Slice(r.top, func(i, j int) bool { return r.top[i].execMS > r.top[j].execMS })
		r.top = r.top[:min(3, len(r.top))]
		results = append(results, r)
	}
	t.Log("\n" + pgPairTable(results, n))
	if os.Getenv("BENCH_PGEXPLAIN") == "1" {
		t.Log("\n" + explainOurPair(t, dsn))
	}

	for _, r := range results {
		if r.pairs != n {
			t.Errorf("%s: %d pairs completed, want %d", r.name, r.pairs, n)
		}
	}
	ours := results[0]
	if ours.commits != int64(2*n) {
		t.Errorf("ours: %d commits for %d pairs, want exactly 2 a pair (%d)", ours.commits, n, 2*n)
	}
	if ours.statements > int64(2*n) {
		t.Errorf("ours: %d statements for %d pairs, want at most 2 a pair (%d)", ours.statements, n, 2*n)
	}
}

// flushStats has every session of db report its statistics now: an idle
// backend reports what it counted only when a second has passed since it
// last did, else ten seconds later. It returns how many sessions it asked,
// each with a statement and a commit of its own (counted in what they
// report).
func flushStats(t *testing.T, db *sql.DB) int {
	t.Helper()
	ctx := context.Background()
	n := db.Stats().OpenConnections
	for range n { // each held until the return: a session of its own
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
	}
	if open := db.Stats().OpenConnections; open != n {
		t.Fatalf("flushing statistics: %d sessions open, had %d", open, n)
	}
	return n
}

// explainOurPair runs two more pairs of ours on "k" through a session that
// has auto_explain send it the plans of its statements, with ANALYZE,
// BUFFERS and WAL, and returns the second pair's.
func explainOurPair(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"auto_explain.log_min_duration": "0", "auto_explain.log_analyze": "on", "auto_explain.log_buffers": "on",
		"auto_explain.log_wal": "on", "client_min_messages": "log",
	} {
		cfg.RuntimeParams[k] = v
	}
	var plans strings.Builder
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.HasPrefix(n.Message, "duration:") {
			fmt.Fprintf(&plans, "%s\n\n", n.Message)
		}
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // the notices of one session, in order
	coord := sqlCoordinatorPrefix(t, db, sqlbackend.Postgres, "pairs_")
	ctx := context.Background()
	for range 2 { // the second pair's plans: the session's caches warm
		plans.Reset()
		l, err := coord.Grant(ctx, "k", leaseTTL)
		if err == nil {
			err = coord.Release(ctx, "k", l.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return "ours, one Grant+Release pair (auto_explain: ANALYZE, BUFFERS, WAL):\n" + plans.String()
}

// settledSnapshot reads the counters once the backends have reported
// theirs (see flushStats): until two readings agree.
func settledSnapshot(t *testing.T, admin *sql.DB) pgSnapshot {
	t.Helper()
	last := readSnapshot(t, admin)
	for range 15 {
		time.Sleep(300 * time.Millisecond)
		s := readSnapshot(t, admin)
		if s.commits == last.commits && s.walRecords == last.walRecords {
			return s
		}
		last = s
	}
	t.Fatal("the pairs database's statistics never settled")
	return pgSnapshot{}
}

// readSnapshot reads the pairs database's commits and statements and the
// cluster's WAL counters (from the postgres database: none of these reads
// counts in the pairs database).
func readSnapshot(t *testing.T, admin *sql.DB) pgSnapshot {
	t.Helper()
	ctx := context.Background()
	var s pgSnapshot
	err := admin.QueryRowContext(ctx, `SELECT d.xact_commit, w.wal_records, w.wal_fpi, w.wal_bytes::float8
		FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = $1`, pgPairsDB).
		Scan(&s.commits, &s.walRecords, &s.walFPI, &s.walBytes)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := admin.QueryContext(ctx, `SELECT s.queryid, s.query, s.calls, s.total_exec_time
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1`, pgPairsDB)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	s.statements = map[int64]pgStatement{}
	for rows.Next() {
		var id int64
		var st pgStatement
		if err := rows.Scan(&id, &st.query, &st.calls, &st.execMS); err != nil {
			t.Fatal(err)
		}
		s.statements[id] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// tableUpdates returns the updates and the HOT updates of the tables whose
// names are LIKE pattern, read through tables, a session of the pairs
// database.
func tableUpdates(t *testing.T, tables *sql.DB, pattern string) (upd, hot int64) {
	t.Helper()
	// The session reports its own commit at once (see flushStats).
	err := tables.QueryRowContext(context.Background(), `SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0)
		FROM pg_stat_user_tables, pg_stat_force_next_flush() WHERE relname LIKE $1`, pattern).Scan(&upd, &hot)
	if err != nil {
		t.Fatal(err)
	}
	return upd, hot
}

// backendTicks returns utime+stime (clock ticks) of each backend of the
// pairs database but skip, from /proc/<pid>/stat.
func backendTicks(t *testing.T, admin *sql.DB, skip int) map[int]int64 {
	t.Helper()
	rows, err := admin.QueryContext(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> $2`, pgPairsDB, skip)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ticks := map[int]int64{}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // gone since
		}
		// The fields after the command's closing parenthesis, from the
		// third (state): utime and stime are the 14th and 15th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		utime, err1 := strconv.ParseInt(f[11], 10, 64)
		stime, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("/proc/%d/stat: %q", pid, b)
		}
		ticks[pid] = utime + stime
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ticks
}

// pgPairTable prints results per pair, one column a contender, and each
// contender's three statements of the most execution time.
func pgPairTable(results []pgPairCounts, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "per Grant+Release pair, %d pairs each, one goroutine, one key, PostgreSQL with fsync on:\n", n)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	per := func(v float64) string { return strconv.FormatFloat(v/float64(n), 'f', 2, 64) }
	row := func(label string, f func(r pgPairCounts) string) {
		fmt.Fprint(w, label+"\t")
		for _, r := range results {
			fmt.Fprint(w, f(r)+"\t")
		}
		fmt.Fprintln(w)
	}
	row("", func(r pgPairCounts) string { return r.name })
	row("statements", func(r pgPairCounts) string { return per(float64(r.statements)) })
	row("commits", func(r pgPairCounts) string { return per(float64(r.commits)) })
	row("WAL records", func(r pgPairCounts) string { return per(float64(r.walRecords)) })
	row("WAL bytes", func(r pgPairCounts) string { return per(r.walBytes) })
	row("WAL full-page images", func(r pgPairCounts) string { return per(float64(r.walFPI)) })
	row("HOT updates / updates", func(r pgPairCounts) string {
		if r.upd == 0 {
			return "-"
		}
		return fmt.Sprintf("%d/%d (%.0f%%)", r.hot, r.upd, 100*float64(r.hot)/float64(r.upd))
	})
	row("server CPU µs", func(r pgPairCounts) string { return per(float64(r.cpuTicks) * 1e6 / clockTicks) })
	w.Flush()
	for _, r := range results {
		fmt.Fprintf(&b, "%s, server execution time by statement (top 3):\n", r.name)
		for _, s := range r.top {
			q := strings.Join(strings.Fields(s.query), " ")
			if len(q) > 90 {
				q = q[:90] + "…"
			}
			fmt.Fprintf(&b, "  %8.1f µs/pair  %5.2f calls/pair  %s\n", 1000*s.execMS/float64(n), float64(s.calls)/float64(n), q)
		}
	}
	return b.String()
}
