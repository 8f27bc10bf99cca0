package minttest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/redisbackend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// BenchmarkMintCheck is what a mint check adds to a takeover on each lock
// store: "new-holder" is the first token of a holder (one Inspect, the
// read a takeover pays), "seen" a token already found minted (every later
// write: no I/O).
//
//	go test -run '^$' -bench MintCheck -benchtime 2s ./internal/testing/minttest
func BenchmarkMintCheck(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) backend.Backend
	}{
		{"memory", func(b *testing.B) backend.Backend { return memorybackend.New() }},
		{"sqlite", func(b *testing.B) backend.Backend {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "l.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			return sqlBackend(b, db, sqlbackend.SQLite)
		}},
		{"postgres", func(b *testing.B) backend.Backend {
			// The test server runs with fsync off, for speed.
			return sqlBackend(b, pgtest.Start(b).DB(b), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
		}},
		{"etcd", func(b *testing.B) backend.Backend {
			be, err := etcdbackend.New(context.Background(), etcdtest.Client(b))
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
		{"redis", func(b *testing.B) backend.Backend {
			be, err := redisbackend.New(context.Background(), redistest.Start(b, redistest.Config{AppendOnly: true}).Client())
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
	}
	ctx := context.Background()
	for _, s := range stores {
		b.Run(s.name, func(b *testing.B) {
			be := s.open(b)
			b.Cleanup(func() { be.Close() })
			l, err := be.Grant(ctx, backend.Request{Key: "orders/42", LeaseID: "bench-lease-0001", Timeout: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			insp := be.(backend.Inspector)
			b.Run("new-holder", func(b *testing.B) {
				for b.Loop() {
					if err := guard.NewMintCheck(insp).Check(ctx, "orders/42", l.Token); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("seen", func(b *testing.B) {
				mc := guard.NewMintCheck(insp)
				for b.Loop() {
					if err := mc.Check(ctx, "orders/42", l.Token); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func sqlBackend(b *testing.B, db *sql.DB, d sqlbackend.Dialect, opts ...sqlbackend.Option) backend.Backend {
	be, err := sqlbackend.New(context.Background(), db, d, opts...)
	if err != nil {
		b.Fatal(err)
	}
	if err := be.CreateTables(context.Background()); err != nil {
		b.Fatal(err)
	}
	return be
}
