package sqlbackend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// BenchmarkRetention grants and releases a new key per iteration (a lock
// per job), with the retention off and at one second (passes then delete
// the keys of a second before while the loop runs), and reports the key
// rows and the table's bytes at the end of the loop (rows, bytes), then
// after the retention has passed and calls on another key have driven the
// reclaiming (rows-after, bytes-after). Off and On alternate in each
// round; docs/sql.md ("Retention") gives the commands and numbers.
func BenchmarkRetention(b *testing.B) {
	for _, db := range []struct {
		name string
		h    func(b *testing.B) *harness
	}{
		{"SQLite", func(b *testing.B) *harness { return &harness{db: openSQLite(b), dialect: sqlbackend.SQLite} }},
		{"Postgres", func(b *testing.B) *harness { _, h := newPostgres(b); return h }},
	} {
		b.Run(db.name, func(b *testing.B) {
			for _, c := range []struct {
				name      string
				retention time.Duration
			}{{"Off", 0}, {"On", time.Second}} {
				b.Run(c.name, func(b *testing.B) {
					benchRetention(b, db.h(b), c.retention)
				})
			}
		})
	}
}

func benchRetention(b *testing.B, h *harness, retention time.Duration) {
	ctx := context.Background()
	be, err := h.NewBackendWithRetention(ctx, b, retention)
	if err != nil {
		b.Fatal(err)
	}
	sb := be.(*sqlbackend.Backend)
	defer sb.Close()
	grantRelease := func(key, id string) {
		l, err := sb.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := sb.Release(ctx, key, l.LeaseID); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		grantRelease(fmt.Sprintf("job/%09d", i), "lease")
	}
	b.StopTimer()
	size := func() (int64, int64) {
		st, err := sb.Size(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return st.Records, tableBytes(b, h, sb.Table())
	}
	rows, bytes := size()
	b.ReportMetric(float64(rows), "rows")
	b.ReportMetric(float64(bytes), "bytes")
	if retention == 0 {
		return
	}
	time.Sleep(retention + retention/4)
	for i := 0; ; i++ {
		grantRelease("driver", fmt.Sprintf("driver-%d", i))
		if rows, _ = size(); rows <= 1 {
			break
		}
		time.Sleep(retention / 8)
	}
	rows, bytes = size()
	b.ReportMetric(float64(rows), "rows-after")
	b.ReportMetric(float64(bytes), "bytes-after")
}

// tableBytes is the lease table's size: on PostgreSQL with its indexes
// (pg_total_relation_size, after a VACUUM), on SQLite the database file's
// pages in use (page_count - freelist_count, times page_size: each run has
// a file of its own).
func tableBytes(b *testing.B, h *harness, table string) int64 {
	var n int64
	if h.dialect == sqlbackend.Postgres {
		if _, err := h.db.Exec("VACUUM " + table); err != nil {
			b.Fatal(err)
		}
		if err := h.db.QueryRow(`SELECT pg_total_relation_size($1::regclass)`, table).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	err := h.db.QueryRow(`SELECT ((SELECT page_count FROM pragma_page_count()) - (SELECT freelist_count FROM pragma_freelist_count())) * ` +
		`(SELECT page_size FROM pragma_page_size())`).Scan(&n)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
