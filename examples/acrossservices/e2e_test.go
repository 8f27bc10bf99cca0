package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/redisguard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/memorybackend"
)

// redisStore is service B's store in the end-to-end test: one string key
// per resource, written by redisguard in one script with the fence.
type redisStore struct {
	g      *redisguard.Guard
	client *redis.Client
	values string // key prefix
}

func (s *redisStore) key(resource string) string { return s.values + redisguard.Tag(resource) }

func (s *redisStore) Admit(ctx context.Context, resource string, token uint64) error {
	return s.g.Admit(ctx, resource, token)
}

func (s *redisStore) Write(ctx context.Context, resource string, token uint64, value []byte) error {
	return s.g.Write(ctx, resource, token, redisguard.Set(s.key(resource), value))
}

// FailedWrite sets the key and then HSETs it: the script refuses the HSET
// before it writes anything.
func (s *redisStore) FailedWrite(ctx context.Context, resource string, token uint64, value []byte) error {
	err := s.g.Write(ctx, resource, token, redisguard.Set(s.key(resource), value), redisguard.HSet(s.key(resource), "f", "v"))
	if err == nil {
		return errors.New("a SET then HSET of one key succeeded")
	}
	return err
}

func (s *redisStore) read(ctx context.Context, resource string) (string, error) {
	v, err := s.client.Get(ctx, s.key(resource)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

// deployment is the holder's client, service A on PostgreSQL, and service
// B on Redis, each on its own loopback port, with fresh tables and keys.
type deployment struct {
	holder *holderClient
	a      *serviceA
	b      *serviceB
	bConn  *grpc.ClientConn
	db     *sql.DB
	values string // A's table
	redis  *redisStore
}

var deployments atomic.Int64

func deploy(ctx context.Context, t testing.TB, db *sql.DB, rc *redis.Client) (*deployment, error) {
	n := deployments.Add(1)
	d := &deployment{db: db, values: fmt.Sprintf("values_%d", n)}
	base := fmt.Sprintf("e2e:%d:", n)
	d.redis = &redisStore{g: redisguard.New(rc, redisguard.WithPrefix(base+"fence:")), client: rc, values: base + "value:"}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d.b = &serviceB{store: d.redis}
	t.Cleanup(serveB(lis, d.b))
	if d.bConn, err = dialB(lis.Addr().String()); err != nil {
		return nil, err
	}
	t.Cleanup(func() { d.bConn.Close() })
	if d.a, err = newServiceA(ctx, db, sqlguard.Postgres, fmt.Sprintf("fences_%d", n), d.values, d.bConn); err != nil {
		return nil, err
	}
	srv := httptest.NewServer(d.a.Handler())
	t.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	d.holder = newHolderClient(srv.URL, tr)
	return d, nil
}

// readA reads resource's value from A's table, directly.
func (d *deployment) readA(ctx context.Context, resource string) (string, error) {
	var v []byte
	err := d.db.QueryRowContext(ctx, "SELECT value FROM "+d.values+" WHERE resource = $1", []byte(resource)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return string(v), err
}

// chain is the guard suite's view of the whole deployment: the holder's
// writes go over HTTP to A, which writes to PostgreSQL and over gRPC to B,
// which writes to Redis. Reads look at A's database or at B's Redis.
type chain struct {
	d      *deployment
	readsB bool
}

func (c *chain) Admit(ctx context.Context, resource string, token uint64) error {
	return c.d.holder.put(guard.ContextWithToken(ctx, resource, token), "admit", "")
}

func (c *chain) Write(ctx context.Context, resource string, token uint64, value string) error {
	return c.d.holder.put(guard.ContextWithToken(ctx, resource, token), "write", value)
}

func (c *chain) FailedWrite(ctx context.Context, resource string, token uint64, value string) error {
	return c.d.holder.put(guard.ContextWithToken(ctx, resource, token), "fail", value)
}

func (c *chain) Read(ctx context.Context, resource string) (string, error) {
	if c.readsB {
		return c.d.redis.read(ctx, resource)
	}
	return c.d.readA(ctx, resource)
}

type chainHarness struct {
	db     *sql.DB
	rc     *redis.Client
	readsB bool
}

func (h *chainHarness) NewGuardStore(ctx context.Context, t testing.TB) (conformance.GuardStore, error) {
	d, err := deploy(ctx, t, h.db, h.rc)
	if err != nil {
		return nil, err
	}
	return &chain{d: d, readsB: h.readsB}, nil
}

// The guard suite holds the whole chain (HTTP, PostgreSQL, gRPC, Redis) to
// the rules of one guard, racing writers included, reading either store.
func TestChainConformance(t *testing.T) {
	db := pgtest.Start(t).DB(t)
	rc := redistest.Start(t, redistest.Config{}).Client()
	t.Run("ReadA", func(t *testing.T) { conformance.RunGuard(t, &chainHarness{db: db, rc: rc}) })
	t.Run("ReadB", func(t *testing.T) { conformance.RunGuard(t, &chainHarness{db: db, rc: rc, readsB: true}) })
}

// A holder stalls past its TTL; a second holder fences at B, then writes
// through A; every late write of the first holder is refused, first by B
// (A rolls back) and then by A's own database, and none is applied.
func TestLateHolderRefusedEverywhere(t *testing.T) {
	ctx := context.Background()
	db := pgtest.Start(t).DB(t)
	rc := redistest.Start(t, redistest.Config{}).Client()
	d, err := deploy(ctx, t, db, rc)
	if err != nil {
		t.Fatal(err)
	}
	clock := memorybackend.NewFakeClock(time.Now())
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	coord := fencing.New(mem)
	const key = "orders/42"

	values := func(wantA, wantB string) {
		t.Helper()
		a, err := d.readA(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		b, err := d.redis.read(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if a != wantA || b != wantB {
			t.Fatalf("A's database holds %q, B's Redis %q; want %q, %q", a, b, wantA, wantB)
		}
	}
	late := func(ctx context.Context, fence uint64, n int) {
		t.Helper()
		for i := range n {
			err := d.holder.put(ctx, "write", fmt.Sprintf("late %d", i))
			var stale *guard.StaleTokenError
			if !errors.As(err, &stale) || !errors.Is(err, guard.ErrStaleToken) || stale.Token != 1 || stale.Fence != fence || stale.Resource != key {
				t.Fatalf("late write %d: got %v (%+v), want token 1 refused below fence %d", i, err, stale, fence)
			}
		}
	}

	first, err := coord.Grant(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx1 := guard.ContextWithToken(ctx, key, first.Token)
	if err := d.holder.put(ctx1, "write", "first"); err != nil {
		t.Fatalf("the first holder's write: %v", err)
	}
	values("first", "first")

	// The first holder stalls past its TTL; the coordinator hands the key on.
	if _, err := coord.Grant(ctx, key, 10*time.Second); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("grant while the first lease is live: %v, want ErrLeaseHeld", err)
	}
	clock.Advance(first.TTL + first.Margin + time.Millisecond)
	second, err := coord.Grant(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if second.Token <= first.Token {
		t.Fatalf("second token %d, first %d", second.Token, first.Token)
	}
	ctx2 := guard.ContextWithToken(ctx, key, second.Token)

	// The second holder fences at B only, over gRPC.
	if err := callB(ctx2, d.bConn, "admit", nil); err != nil {
		t.Fatalf("the second holder's admit at B: %v", err)
	}
	late(ctx1, second.Token, 3) // A's database admits token 1, B refuses it, A rolls back
	values("first", "first")
	if h, b := d.a.refusedHere.Load(), d.a.refusedByB.Load(); h != 0 || b != 3 || d.b.refused.Load() != 3 {
		t.Fatalf("refused by A's database %d, reported by B %d, counted at B %d; want 0, 3, 3", h, b, d.b.refused.Load())
	}

	if err := d.holder.put(ctx2, "write", "second"); err != nil {
		t.Fatalf("the second holder's write: %v", err)
	}
	values("second", "second")
	late(ctx1, second.Token, 3) // now A's database refuses it, and B is not called
	values("second", "second")
	if h, b := d.a.refusedHere.Load(), d.b.refused.Load(); h != 3 || b != 3 {
		t.Fatalf("refused by A's database %d, by B %d; want 3, 3", h, b)
	}
	// The second holder goes on writing.
	if err := d.holder.put(ctx2, "write", "second again"); err != nil {
		t.Fatal(err)
	}
	values("second again", "second again")
}
