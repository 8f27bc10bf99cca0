package fencing_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/sqlbackend"
)

// The PostgreSQL container: the official image, or the local one of
// scripts/build-test-images.sh named by FENCING_POSTGRES_IMAGE.
const (
	defaultPostgresImage = "postgres:15"
	postgresImageEnv     = "FENCING_POSTGRES_IMAGE"
	postgresPort         = "5432/tcp"
)

// TestIntegrationPostgres runs the conformance suite against PostgreSQL in
// a container (fsync on), then kills the container and starts it again:
// tokens go on from where they were.
func TestIntegrationPostgres(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := context.Background()
	img := image(postgresImageEnv, defaultPostgresImage)
	requireImage(ctx, t, img)
	ctr, err := testcontainers.Run(ctx, img,
		testcontainers.WithLogger(tclog.TestLogger(t)),
		testcontainers.WithExposedPorts(postgresPort),
		loopbackOnly(postgresPort),
		testcontainers.WithEnv(map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust"}),
		testcontainers.WithCmd("postgres", "-c", "fsync=on", "-c", "synchronous_commit=on"),
		testcontainers.WithWaitStrategy(loopbackReady(postgresPort, postgresReady)),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		startFailed(t, "start "+img, err)
	}
	db := openPostgres(t, hostPort(ctx, t, ctr, postgresPort))
	h := &postgresHarness{db: db}

	t.Run("Conformance", func(t *testing.T) { conformance.Run(t, h) })

	t.Run("KillAndRestartKeepsTokens", func(t *testing.T) {
		b := h.newBackend(ctx, t, "restart_")
		c := fencing.New(b)
		var last uint64
		for range 3 {
			l := itGrant(ctx, t, c, "k", time.Minute, 0)
			if err := c.Release(ctx, "k", l.ID); err != nil {
				t.Fatal(err)
			}
			last = l.Token
		}
		live := itGrant(ctx, t, c, "live", 10*time.Minute, time.Second)
		cli := dockerClient(ctx, t)
		if _, err := cli.ContainerKill(ctx, ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
			t.Fatalf("kill the postgres container: %v", err)
		}
		if err := ctr.Start(ctx); err != nil {
			t.Fatalf("restart the postgres container: %v", err)
		}
		c = fencing.New(h.newBackendOn(ctx, t, openPostgres(t, hostPort(ctx, t, ctr, postgresPort)), "restart_"))
		next := itGrant(ctx, t, c, "k", time.Minute, 0)
		if next.Token != last+1 {
			t.Errorf("grant after the restart got token %d; the last before was %d, so want %d", next.Token, last, last+1)
		}
		itWantSurvived(ctx, t, c, live)
	})
}

// postgresReady connects to the server at addr and runs SELECT 1.
func postgresReady(ctx context.Context, addr string) error {
	db, err := sql.Open("pgx", postgresDSN(addr))
	if err != nil {
		return err
	}
	defer db.Close()
	var one int
	return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

func postgresDSN(addr string) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", addr)
}

// openPostgres opens the server at addr once it answers, closed when t
// ends.
func openPostgres(t *testing.T, addr string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", postgresDSN(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if err = db.PingContext(ctx); err == nil {
			return db
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("postgres at %s: %v", addr, err)
	return nil
}

// postgresHarness makes backends with table prefixes of their own on one
// server, whose settings pass the backend's safety checks.
type postgresHarness struct {
	db *sql.DB
	n  atomic.Int64
}

func (h *postgresHarness) newBackendOn(ctx context.Context, t testing.TB, db *sql.DB, prefix string) *sqlbackend.Backend {
	t.Helper()
	b, err := sqlbackend.New(db, sqlbackend.Postgres, sqlbackend.WithTablePrefix(prefix))
	if err == nil {
		err = b.CreateTables(ctx)
	}
	if err != nil {
		t.Fatalf("sqlbackend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func (h *postgresHarness) newBackend(ctx context.Context, t testing.TB, prefix string) *sqlbackend.Backend {
	return h.newBackendOn(ctx, t, h.db, prefix)
}

func (h *postgresHarness) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	b, err := sqlbackend.New(h.db, sqlbackend.Postgres, sqlbackend.WithTablePrefix(fmt.Sprintf("it%d_", h.n.Add(1))))
	if err != nil {
		return nil, err
	}
	return b, b.CreateTables(ctx)
}

func (h *postgresHarness) Wait(ctx context.Context, d time.Duration) error {
	return conformance.Sleep(ctx, d)
}

func (h *postgresHarness) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: 400 * time.Millisecond, Slack: 10 * time.Millisecond, DenseTokens: true, MaxToken: sqlbackend.MaxToken}
}
