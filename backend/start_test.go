package backend_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	_ "modernc.org/sqlite"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/redisbackend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// starter makes one backend the way its package's New does, with a
// client that is nil (bad), reaches nothing (nowhere) or an unsafe store.
type starter struct {
	name string
	// bad returns New's error for a nil client or an unknown check mode.
	bad func(ctx context.Context, nilClient bool) error
	// nowhere returns New's error for a client of an address where
	// nothing listens, under mode.
	nowhere func(ctx context.Context, mode backend.CheckMode) error
}

// TestNewErrorsShared: every backend's New reports a bad configuration
// with ErrInvalidConfig and a check that cannot reach its store with
// ErrUnreachable (kubebackend, a module of its own, holds itself to the
// same in its TestNewErrors), and CheckSkip sends nothing. An unsafe store
// is ErrUnsafeStore: SQLite here, Redis in redisbackend's tests (it needs
// a server).
func TestNewErrorsShared(t *testing.T) {
	addr := closedAddr(t)
	starters := []starter{
		{"etcd",
			func(ctx context.Context, nilClient bool) error {
				if nilClient {
					_, err := etcdbackend.New(ctx, nil)
					return err
				}
				_, err := etcdbackend.New(ctx, etcdClient(t, addr), etcdbackend.WithSafetyCheck(42))
				return err
			},
			func(ctx context.Context, mode backend.CheckMode) error {
				b, err := etcdbackend.New(ctx, etcdClient(t, addr), etcdbackend.WithSafetyCheck(mode))
				closeIf(b, err)
				return err
			}},
		{"redis",
			func(ctx context.Context, nilClient bool) error {
				if nilClient {
					_, err := redisbackend.New(ctx, nil)
					return err
				}
				_, err := redisbackend.New(ctx, redisClient(t, addr), redisbackend.WithSafetyCheck(42))
				return err
			},
			func(ctx context.Context, mode backend.CheckMode) error {
				b, err := redisbackend.New(ctx, redisClient(t, addr), redisbackend.WithSafetyCheck(mode))
				closeIf(b, err)
				return err
			}},
		{"postgres",
			func(ctx context.Context, nilClient bool) error {
				if nilClient {
					_, err := sqlbackend.New(ctx, nil, sqlbackend.Postgres)
					return err
				}
				_, err := sqlbackend.New(ctx, pgDB(t, addr), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(42))
				return err
			},
			func(ctx context.Context, mode backend.CheckMode) error {
				b, err := sqlbackend.New(ctx, pgDB(t, addr), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(mode))
				closeIf(b, err)
				return err
			}},
	}
	for _, s := range starters {
		t.Run(s.name, func(t *testing.T) {
			ctx := context.Background()
			for _, nilClient := range []bool{true, false} {
				if err := s.bad(ctx, nilClient); !errors.Is(err, backend.ErrInvalidConfig) {
					t.Errorf("New with a bad configuration (nil client: %v): %v, want ErrInvalidConfig", nilClient, err)
				}
			}
			// The etcd client waits for a connection as long as ctx
			// allows: the deadline is when New gives up, not a bound
			// the test measures.
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := s.nowhere(ctx, backend.CheckRefuse); !errors.Is(err, backend.ErrUnreachable) {
				t.Errorf("New on an address where nothing listens: %v, want ErrUnreachable", err)
			}
			if err := s.nowhere(ctx, backend.CheckSkip); err != nil {
				t.Errorf("New with CheckSkip: %v, want nil (nothing sent)", err)
			}
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		ctx := context.Background()
		db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "f.db")+"?_pragma=journal_mode(MEMORY)")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := sqlbackend.New(ctx, db, sqlbackend.SQLite, sqlbackend.WithSafetyCheck(42)); !errors.Is(err, backend.ErrInvalidConfig) {
			t.Errorf("New with CheckMode(42): %v, want ErrInvalidConfig", err)
		}
		if _, err := sqlbackend.New(ctx, db, sqlbackend.SQLite); !errors.Is(err, backend.ErrUnsafeStore) {
			t.Errorf("New on a journal in memory: %v, want ErrUnsafeStore", err)
		}
		b, err := sqlbackend.New(ctx, db, sqlbackend.SQLite, sqlbackend.WithSafetyCheck(backend.CheckWarn), sqlbackend.WithLogger(quiet()))
		if err != nil {
			t.Fatalf("New with CheckWarn on a journal in memory: %v, want nil", err)
		}
		b.Close()
	})
}

func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func closeIf(b interface{ Close() error }, err error) {
	if err == nil {
		b.Close()
	}
}

func etcdClient(t *testing.T, addr string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func pgDB(t *testing.T, addr string) *sql.DB {
	db, err := sql.Open("pgx", "postgres://app@"+addr+"/app?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
