package integration_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"

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
		conformance.RunRestart(t, &postgresRestarter{t: t, ctr: ctr, h: h})
	})
}

// postgresRestarter is a conformance.Restarter on the test's PostgreSQL
// container (fsync on): docker kill (SIGKILL) and start. The published port
// changes across the restart, so each backend opens its own pool.
type postgresRestarter struct {
	t   *testing.T
	ctr testcontainers.Container
	h   *postgresHarness
}

func (r *postgresRestarter) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	db := openPostgres(r.t, hostPort(ctx, r.t, r.ctr, postgresPort))
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.Postgres, sqlbackend.WithTablePrefix("restart_"))
	if err != nil {
		return nil, err
	}
	return b, b.CreateTables(ctx)
}

func (r *postgresRestarter) Kill(testing.TB) { killContainer(r.t, r.ctr) }

func (r *postgresRestarter) Start(testing.TB) {
	if err := r.ctr.Start(context.Background()); err != nil {
		r.t.Fatalf("restart the postgres container: %v", err)
	}
}

func (r *postgresRestarter) Traits() conformance.Traits { return r.h.Traits() }

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
	// A pool per backend, each closed with the test that opened the
	// harness: idle connections of pools whose backends are done close
	// soon, so that they do not add up past the server's max_connections
	// (100; runD2: "sorry, too many clients already").
	db.SetConnMaxIdleTime(2 * time.Second)
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

func (h *postgresHarness) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	b, err := sqlbackend.New(context.Background(), h.db, sqlbackend.Postgres, sqlbackend.WithTablePrefix(fmt.Sprintf("it%d_", h.n.Add(1))))
	if err != nil {
		return nil, err
	}
	return b, b.CreateTables(ctx)
}

func (h *postgresHarness) Wait(ctx context.Context, d time.Duration) error {
	return conformance.Sleep(ctx, d)
}

func (h *postgresHarness) Traits() conformance.Traits {
	// Not dense: a PostgreSQL token carries the WAL timeline in its high
	// bits (sqlbackend.EpochShift).
	return conformance.Traits{MinTTL: 400 * time.Millisecond, Slack: 10 * time.Millisecond, MaxToken: sqlbackend.MaxToken}
}
