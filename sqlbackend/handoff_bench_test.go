package sqlbackend_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/heldtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// grantCounter counts a backend's Grant calls; every other method, the
// line's included, is the embedded backend's.
type grantCounter struct {
	*sqlbackend.Backend
	grants *atomic.Int64
}

func (g grantCounter) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	g.grants.Add(1)
	return g.Backend.Grant(ctx, req)
}

// BenchmarkLockHandoff: n waiters on one key, spread over 4 Backends with
// a pool each (4 processes, as far as the store can tell), each looping
// Lock and Release, with and without fencing.WithFIFO; ns/op is one
// handoff (a Lock that got the key and its Release), grants/handoff the
// grant attempts it took. A handoff between two Backends is seen by the
// poll (SQLite: 10 ms; postgres-poll, without a listener: 100 ms) or, on
// postgres-listen (WithListener), by NOTIFY.
func BenchmarkLockHandoff(b *testing.B) {
	const backends = 4
	stores := []struct {
		name string
		open func(b *testing.B) (*harness, []sqlbackend.Option)
	}{
		{"sqlite", func(b *testing.B) (*harness, []sqlbackend.Option) {
			path := filepath.Join(b.TempDir(), "handoff.db")
			return &harness{db: openSQLitePath(b, path), dialect: sqlbackend.SQLite}, nil
		}},
		{"postgres-poll", func(b *testing.B) (*harness, []sqlbackend.Option) {
			_, h := newPostgres(b)
			return h, nil
		}},
		{"postgres-listen", func(b *testing.B) (*harness, []sqlbackend.Option) {
			srv, h := newPostgres(b)
			return h, []sqlbackend.Option{sqlbackend.WithListener(srv.DSN())}
		}},
	}
	for _, store := range stores {
		b.Run(store.name, func(b *testing.B) {
			h, extra := store.open(b)
			for _, n := range []int{1, 8, 32} {
				for _, fifo := range []bool{false, true} {
					b.Run(fmt.Sprintf("waiters=%d/fifo=%v", n, fifo), func(b *testing.B) {
						benchHandoff(b, h, extra, backends, n, fifo)
					})
				}
			}
		})
	}
}

func benchHandoff(b *testing.B, h *harness, extra []sqlbackend.Option, backends, n int, fifo bool) {
	ctx := context.Background()
	prefix := sqlbackend.WithTablePrefix(fmt.Sprintf("handoff%d_", h.n.Add(1)))
	var grants atomic.Int64
	var cs []*fencing.Coordinator
	for i := range backends {
		db := h.db
		if h.dialect == sqlbackend.SQLite {
			// A pool of its own on the same file, as another process has.
			db = openSQLitePath(b, dbPath(b, h))
		}
		opts := append(append([]sqlbackend.Option{prefix}, h.opts...), extra...)
		sb, err := sqlbackend.New(context.Background(), db, h.dialect, opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close()
		if i == 0 {
			if err := sb.CreateTables(ctx); err != nil {
				b.Fatal(err)
			}
		}
		cs = append(cs, fencing.New(grantCounter{sb, &grants}))
	}
	var opts []fencing.LockOption
	if fifo {
		opts = append(opts, fencing.WithFIFO())
	}
	heldtest.LockHandoffs(b, cs, "k", n, opts...)
	b.ReportMetric(float64(grants.Load())/float64(b.N), "grants/handoff")
}

// dbPath is the file of h's SQLite database.
func dbPath(b *testing.B, h *harness) string {
	var seq int
	var name, file string
	if err := h.db.QueryRow("PRAGMA database_list").Scan(&seq, &name, &file); err != nil {
		b.Fatal(err)
	}
	return file
}
