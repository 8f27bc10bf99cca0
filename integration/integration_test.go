package integration_test

// Integration tests: the real servers in containers, through testcontainers-go
// and the local Docker engine. See docs/integration.md.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/redisbackend"
)

// Images used when the environment names none: the official ones, pulled by
// the Docker engine when missing. scripts/build-test-images.sh builds local
// stand-ins for machines that cannot pull.
const (
	defaultRedisImage = "redis:7.4"
	defaultEtcdImage  = "gcr.io/etcd-development/etcd:v3.7.3"
)

// Environment variables that choose other images.
const (
	redisImageEnv = "FENCING_REDIS_IMAGE"
	etcdImageEnv  = "FENCING_ETCD_IMAGE"
)

const (
	redisPort = "6379/tcp"
	etcdPort  = "2379/tcp"
)

// loopback is where the containers' ports are published: tests send
// traffic to this machine only.
var loopback = netip.MustParseAddr("127.0.0.1")

// The containers' election settings (etcd) and the traits below match the
// backends' own conformance tests, which run the same servers in-process.
const (
	// etcdMinTTL is etcd's minimum lease TTL with --election-timeout 100.
	etcdMinTTL = time.Second
	// etcdSlack covers the leader's revoke loop (every 500ms), which
	// deletes an expired lease's key some time after its TTL.
	etcdSlack = 1500 * time.Millisecond
	// redisMinTTL is long enough that a busy machine still sees a lease
	// live right after its grant; Redis decides expiry to the microsecond.
	redisMinTTL = 400 * time.Millisecond
	// redisSlack covers microsecond rounding and clock-rate differences
	// between this process and the server's TIME (one kernel here).
	redisSlack = 5 * time.Millisecond
)

// TestIntegrationRedis runs the conformance suite against Redis in a
// container started through testcontainers' redis module, then cuts a
// holder off the server and kills and restarts a server with
// appendfsync always.
func TestIntegrationRedis(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := context.Background()
	requireImage(ctx, t, image(redisImageEnv, defaultRedisImage))
	nw := newNetwork(ctx, t)
	ctr := startRedis(ctx, t, nw, "--appendonly", "yes", "--appendfsync", "everysec")
	addr := hostPort(ctx, t, ctr, redisPort)
	h := &redisHarness{client: newRedisClient(ctx, t, addr)}

	t.Run("Conformance", func(t *testing.T) { conformance.Run(t, h) })

	t.Run("CutOffHolder", func(t *testing.T) {
		cut := faultproxy.Start(t, addr, faultproxy.Hooks{})
		// The holder's client gives up on a request after 500ms, so its
		// renewals fail fast during the cut.
		holderClient := redis.NewClient(&redis.Options{
			Addr: cut.Addr(), ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		})
		t.Cleanup(func() { holderClient.Close() })
		holder := fencing.New(newRedisBackend(ctx, t, holderClient, "cut:"))
		other := fencing.New(newRedisBackend(ctx, t, h.client, "cut:"))
		testCutOffHolder(t, cut, holder, other, time.Second, 500*time.Millisecond, redisSlack)
	})

	t.Run("KillAndRestartKeepsTokens", func(t *testing.T) {
		ctr := startRedis(context.Background(), t, nil, "--appendonly", "yes", "--appendfsync", "always")
		conformance.RunRestart(t, &redisRestarter{t: t, ctr: ctr})
	})
}

// redisRestarter is a conformance.Restarter on a Redis container of the
// test's own, with appendfsync always: docker kill (SIGKILL) and start. The
// published port changes across the restart.
type redisRestarter struct {
	t   *testing.T
	ctr *tcredis.RedisContainer
}

func (r *redisRestarter) NewBackend(ctx context.Context, _ testing.TB) (backend.Backend, error) {
	c := newRedisClient(ctx, r.t, hostPort(ctx, r.t, r.ctr, redisPort))
	return redisbackend.New(ctx, c, redisbackend.WithPrefix("restart:"), redisbackend.WithLogger(slog.New(slog.DiscardHandler)))
}

func (r *redisRestarter) Kill(testing.TB) { killContainer(r.t, r.ctr) }

func (r *redisRestarter) Start(testing.TB) {
	if err := r.ctr.Start(context.Background()); err != nil {
		r.t.Fatalf("restart the redis container: %v", err)
	}
}

func (r *redisRestarter) Traits() conformance.Traits { return (&redisHarness{}).Traits() }

// killContainer kills ctr with SIGKILL: only what the server made durable
// survives.
func killContainer(t *testing.T, ctr testcontainers.Container) {
	t.Helper()
	ctx := context.Background()
	if _, err := dockerClient(ctx, t).ContainerKill(ctx, ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatalf("kill the container: %v", err)
	}
}

// TestIntegrationEtcd runs the conformance suite against etcd in a
// container, then cuts a holder off the server, freezes a server for longer
// than a lease while its holder renews, and kills and restarts a server.
func TestIntegrationEtcd(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := context.Background()
	requireImage(ctx, t, image(etcdImageEnv, defaultEtcdImage))
	nw := newNetwork(ctx, t)
	_, endpoint := startEtcd(ctx, t, nw)
	h := &etcdHarness{client: newEtcdClient(t, endpoint)}

	t.Run("Conformance", func(t *testing.T) { conformance.Run(t, h) })

	t.Run("CutOffHolder", func(t *testing.T) {
		cut := faultproxy.Start(t, endpoint, faultproxy.Hooks{})
		holder := fencing.New(newEtcdBackend(t, newEtcdClient(t, cut.Addr()), "cut/"))
		other := fencing.New(newEtcdBackend(t, h.client, "cut/"))
		testCutOffHolder(t, cut, holder, other, time.Second, time.Second, etcdSlack)
	})

	t.Run("PauseLongerThanLease", testEtcdPause)
	t.Run("KillAndRestartKeepsTokens", func(t *testing.T) {
		ctr, endpoint := startEtcd(context.Background(), t, nil)
		conformance.RunRestart(t, &etcdRestarter{t: t, ctr: ctr, endpoint: endpoint})
	})
}

// etcdRestarter is a conformance.Restarter on an etcd container of the
// test's own: docker kill (SIGKILL) and start on its data directory. Its
// published port stays put, and etcd restores every lease with its full
// TTL when a leader takes over (RunRestart allows for that).
type etcdRestarter struct {
	t        *testing.T
	ctr      testcontainers.Container
	endpoint string
}

func (r *etcdRestarter) NewBackend(context.Context, testing.TB) (backend.Backend, error) {
	return etcdbackend.New(context.Background(), newEtcdClient(r.t, r.endpoint), etcdbackend.WithPrefix("restart/"))
}

func (r *etcdRestarter) Kill(testing.TB) { killContainer(r.t, r.ctr) }

func (r *etcdRestarter) Start(testing.TB) {
	if err := r.ctr.Start(context.Background()); err != nil {
		r.t.Fatalf("restart the etcd container: %v", err)
	}
}

func (r *etcdRestarter) Traits() conformance.Traits { return (&etcdHarness{}).Traits() }

// testEtcdPause freezes etcd (docker pause) for longer than a lease while the
// lease's holder keeps renewing it: no renewal sent after the freeze may
// succeed, the holder must learn that its lease is gone, and the next grant
// gets a larger token.
func testEtcdPause(t *testing.T) {
	ctx := context.Background()
	ctr, endpoint := startEtcd(ctx, t, nil)
	cli := newEtcdClient(t, endpoint)
	c := fencing.New(newEtcdBackend(t, cli, "pause/"))
	const timeout, margin = time.Second, time.Second
	lease := itGrant(ctx, t, c, "k", timeout, margin)

	type result struct {
		sent time.Time
		err  error
	}
	var (
		mu      sync.Mutex
		results []result
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			sent := time.Now()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			_, err := c.Renew(rctx, "k", lease.ID, timeout, margin)
			cancel()
			mu.Lock()
			results = append(results, result{sent, err})
			mu.Unlock()
			if errors.Is(err, fencing.ErrLeaseExpired) || errors.Is(err, fencing.ErrLeaseNotFound) {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()

	// Let the holder renew at least once before the freeze.
	for renewed := false; !renewed; {
		itSleep(ctx, t, 100*time.Millisecond)
		mu.Lock()
		for _, r := range results {
			renewed = renewed || r.err == nil
		}
		n := len(results)
		mu.Unlock()
		if !renewed && n >= 20 {
			t.Fatalf("the holder's first %d renewals all failed", n)
		}
	}
	docker := dockerClient(ctx, t)
	if _, err := docker.ContainerPause(ctx, ctr.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		t.Fatalf("pause etcd: %v", err)
	}
	paused := time.Now()
	itSleep(ctx, t, lease.TTL+lease.Margin+etcdSlack+time.Second)
	if _, err := docker.ContainerUnpause(ctx, ctr.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
		t.Fatalf("unpause etcd: %v", err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not learn within 30s of the unpause that its lease is gone")
	}

	mu.Lock()
	defer mu.Unlock()
	before := 0
	for _, r := range results {
		switch {
		case r.sent.Before(paused):
			if r.err == nil {
				before++
			}
		case r.err == nil:
			t.Errorf("a renewal sent %v after etcd froze succeeded: the lease outlived its TTL", r.sent.Sub(paused))
		}
	}
	if before == 0 {
		t.Errorf("no renewal succeeded before the pause: %v", results)
	}
	last := results[len(results)-1].err
	if !errors.Is(last, fencing.ErrLeaseExpired) && !errors.Is(last, fencing.ErrLeaseNotFound) {
		t.Errorf("the holder's last renewal: %v, want ErrLeaseExpired or ErrLeaseNotFound", last)
	}
	t.Logf("%d renewals, %d before the pause; the last one: %v", len(results), before, last)

	next := itGrantWhenFree(ctx, t, fencing.New(newEtcdBackend(t, cli, "pause/")), "k", time.Minute, etcdSlack+5*time.Second)
	if next.Token <= lease.Token {
		t.Errorf("grant after the pause got token %d, not larger than the frozen lease's %d", next.Token, lease.Token)
	}
	itWantCheck(ctx, t, c, "k", lease.Token, false)
}

// testCutOffHolder takes a lease through holder, cuts holder off the server
// until the lease has expired, lets other take the key, and heals the cut:
// the old holder's renewal and release are rejected, its token checks false
// and the new holder's token is larger and checks true.
func testCutOffHolder(t *testing.T, cut *faultproxy.Proxy, holder, other *fencing.Coordinator, timeout, margin, slack time.Duration) {
	ctx := context.Background()
	const key = "cut-off"
	old := itGrant(ctx, t, holder, key, timeout, margin)
	granted := time.Now()

	cut.Partition()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	_, err := holder.Renew(rctx, key, old.ID, timeout, margin)
	cancel()
	if err == nil {
		t.Fatal("Renew through the cut succeeded")
	}
	t.Logf("Renew during the cut: %v", err)

	itSleep(ctx, t, old.TTL+old.Margin+slack-time.Since(granted))
	next := itGrantWhenFree(ctx, t, other, key, time.Minute, 5*time.Second)
	if next.Token <= old.Token {
		t.Fatalf("the new holder got token %d, not larger than the old holder's %d", next.Token, old.Token)
	}

	cut.Heal()
	// The old holder's client reconnects; until then its calls fail with
	// transport errors, which say nothing either way.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := holder.Renew(rctx, key, old.ID, timeout, margin)
		cancel()
		if err == nil {
			t.Fatal("the old holder renewed its lease after another holder took the key")
		}
		if errors.Is(err, fencing.ErrLeaseNotFound) || errors.Is(err, fencing.ErrLeaseExpired) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old holder's renewal after the heal: %v; want ErrLeaseNotFound or ErrLeaseExpired", err)
		}
		itSleep(ctx, t, 200*time.Millisecond)
	}
	if err := holder.Release(ctx, key, old.ID); !errors.Is(err, fencing.ErrLeaseNotFound) && !errors.Is(err, fencing.ErrLeaseExpired) {
		t.Errorf("the old holder's Release after the heal: %v; want ErrLeaseNotFound or ErrLeaseExpired", err)
	}
	itWantCheck(ctx, t, holder, key, old.Token, false)
	itWantCheck(ctx, t, holder, key, next.Token, true)
	itWantLive(ctx, t, other, key, next.Token)
}

// redisHarness runs the conformance suite on one Redis container, giving
// each backend a fresh prefix.
type redisHarness struct {
	client *redis.Client
	n      atomic.Int64
}

func (h *redisHarness) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	return redisbackend.New(ctx, h.client,
		redisbackend.WithPrefix(fmt.Sprintf("conformance%d:", h.n.Add(1))),
		redisbackend.WithLogger(slog.New(slog.DiscardHandler)))
}

func (h *redisHarness) Wait(ctx context.Context, d time.Duration) error {
	return conformance.Sleep(ctx, d)
}

func (h *redisHarness) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: redisMinTTL, Slack: redisSlack, DenseTokens: true, MaxToken: redisbackend.MaxToken}
}

// newRedisBackend returns a Redis backend with prefix over c, closed when t
// ends.
func newRedisBackend(ctx context.Context, t *testing.T, c redis.UniversalClient, prefix string) *redisbackend.Backend {
	t.Helper()
	b, err := redisbackend.New(ctx, c, redisbackend.WithPrefix(prefix),
		redisbackend.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("redisbackend.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// etcdHarness runs the conformance suite on one etcd container, giving each
// backend a fresh prefix.
type etcdHarness struct {
	client *clientv3.Client
	n      atomic.Int64
}

func (h *etcdHarness) NewBackend(_ context.Context, t testing.TB) (backend.Backend, error) {
	return etcdbackend.New(context.Background(), h.client, etcdbackend.WithPrefix(fmt.Sprintf("conformance/%d/", h.n.Add(1))))
}

func (h *etcdHarness) Wait(ctx context.Context, d time.Duration) error {
	return conformance.Sleep(ctx, d)
}

func (h *etcdHarness) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: etcdMinTTL, Slack: etcdSlack}
}

// newEtcdBackend returns an etcd backend with prefix over c, closed when t
// ends.
func newEtcdBackend(t *testing.T, c *clientv3.Client, prefix string) *etcdbackend.Backend {
	t.Helper()
	b, err := etcdbackend.New(context.Background(), c, etcdbackend.WithPrefix(prefix))
	if err != nil {
		t.Fatalf("etcdbackend.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// itSleep lets d pass in real time, failing t if ctx ends first.
func itSleep(ctx context.Context, t *testing.T, d time.Duration) {
	t.Helper()
	if err := conformance.Sleep(ctx, max(d, 0)); err != nil {
		t.Fatalf("sleep: %v", err)
	}
}

func itGrant(ctx context.Context, t *testing.T, c *fencing.Coordinator, key string, timeout, margin time.Duration) fencing.Lease {
	t.Helper()
	l, err := c.Grant(ctx, key, timeout, margin)
	if err != nil {
		t.Fatalf("Grant(%q, %v, %v): %v", key, timeout, margin, err)
	}
	return l
}

// itGrantWhenFree grants key, retrying while another lease still holds it
// (a backend may free an expired key a little late), for up to patience.
func itGrantWhenFree(ctx context.Context, t *testing.T, c *fencing.Coordinator, key string, timeout, patience time.Duration) fencing.Lease {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		l, err := c.Grant(ctx, key, timeout)
		if err == nil {
			return l
		}
		if !errors.Is(err, fencing.ErrLeaseHeld) || time.Now().After(deadline) {
			t.Fatalf("Grant(%q) of a key whose lease expired: %v", key, err)
		}
		itSleep(ctx, t, 100*time.Millisecond)
	}
}

func itWantCheck(ctx context.Context, t *testing.T, c *fencing.Coordinator, key string, token uint64, want bool) {
	t.Helper()
	ok, err := c.CheckToken(ctx, key, token)
	if err != nil || ok != want {
		t.Errorf("CheckToken(%q, %d) = %v, %v; want %v", key, token, ok, err, want)
	}
}

func itWantLive(ctx context.Context, t *testing.T, c *fencing.Coordinator, key string, token uint64) {
	t.Helper()
	got, live, err := c.Token(ctx, key)
	if err != nil || !live || got != token {
		t.Errorf("Token(%q) = %d, live %v, %v; want %d, live", key, got, live, err, token)
	}
}

// image returns the image named by the environment variable env, or def.
func image(env, def string) string {
	if img := os.Getenv(env); img != "" {
		return img
	}
	return def
}

// inCI reports whether the tests run in CI, where a missing Docker engine or
// image fails the test instead of skipping it.
func inCI() bool { return os.Getenv("CI") != "" }

// skipOrFail skips the test on a developer's machine and fails it in CI.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if inCI() {
		t.Fatalf(format+" (CI is set, so this fails instead of skipping)", args...)
	}
	t.Skipf(format, args...)
}

// requireDocker skips under -short, and when no Docker engine answers skips
// on a developer's machine and fails in CI.
func requireDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	if !inCI() {
		testcontainers.SkipIfProviderIsNotHealthy(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = errors.New("testcontainers panicked looking for a provider")
			}
		}()
		var p testcontainers.GenericProvider
		if p, err = testcontainers.ProviderDefault.GetProvider(); err == nil {
			err = p.Health(ctx)
			p.Close()
		}
	}()
	if err != nil {
		t.Fatalf("no healthy Docker engine, and CI is set: %v", err)
	}
}

// requireImage makes img available to the engine: already there, or pulled
// once. An image that cannot be had skips the test on a developer's machine
// and fails it in CI.
func requireImage(ctx context.Context, t *testing.T, img string) {
	t.Helper()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		skipOrFail(t, "no Docker client: %v", err)
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, img); err == nil {
		return
	}
	pull, err := cli.ImagePull(ctx, img, client.ImagePullOptions{})
	if err == nil {
		err = pull.Wait(ctx)
		pull.Close()
	}
	if err != nil {
		skipOrFail(t, "image %s is not here and cannot be pulled (%v); build local images with "+
			"scripts/build-test-images.sh and set %s and %s as it prints", img, err, redisImageEnv, etcdImageEnv)
	}
}

// startFailed fails the test after testcontainers could not do what; when
// the cause is its reaper (Ryuk) container, which the engine could not pull
// or start, it skips on a developer's machine instead, saying how to turn
// the reaper off.
func startFailed(t *testing.T, what string, err error) {
	t.Helper()
	if strings.Contains(err.Error(), "reaper") {
		skipOrFail(t, "%s: testcontainers could not start its reaper (Ryuk): %v; "+
			"set TESTCONTAINERS_RYUK_DISABLED=true where the engine cannot pull testcontainers/ryuk", what, err)
	}
	t.Fatalf("%s: %v", what, err)
}

// loopbackOnly publishes the container's ports on 127.0.0.1 only.
func loopbackOnly(ports ...string) testcontainers.CustomizeRequestOption {
	return testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		for _, p := range ports {
			port := network.MustParsePort(p)
			if len(hc.PortBindings[port]) == 0 {
				hc.PortBindings[port] = []network.PortBinding{{HostIP: loopback}}
			}
		}
	})
}

// hostPort returns 127.0.0.1:<the host port that port is published on>. It
// changes when a container restarts.
func hostPort(ctx context.Context, t *testing.T, ctr testcontainers.Container, port string) string {
	t.Helper()
	p, err := ctr.MappedPort(ctx, port)
	if err != nil {
		t.Fatalf("mapped port %s: %v", port, err)
	}
	return net.JoinHostPort(loopback.String(), p.Port())
}

// startRedis starts a Redis container through testcontainers' redis module,
// with extra redis-server arguments, on network nw as well when it is not
// nil, and terminates it when t ends.
func startRedis(ctx context.Context, t *testing.T, nw *testcontainers.DockerNetwork, args ...string) *tcredis.RedisContainer {
	t.Helper()
	img := image(redisImageEnv, defaultRedisImage)
	requireImage(ctx, t, img)
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithLogger(tclog.TestLogger(t)),
		loopbackOnly(redisPort),
		// The module waits for the log line and for the port on the
		// container's host as testcontainers guesses it, which inside a
		// container is the bridge's gateway; ask Redis on loopback instead.
		testcontainers.WithWaitStrategy(
			wait.ForLog("* Ready to accept connections"),
			loopbackReady(redisPort, redisPong),
		),
	}
	if nw != nil {
		opts = append(opts, tcnetwork.WithNetwork([]string{"redis"}, nw))
	}
	if len(args) > 0 {
		opts = append(opts, testcontainers.WithCmdArgs(args...))
	}
	ctr, err := tcredis.Run(ctx, img, opts...)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		startFailed(t, "start "+img, err)
	}
	return ctr
}

// newRedisClient returns a client of the Redis server at addr once it
// answers PING (a restarted server loads its AOF first), closed when t ends.
func newRedisClient(ctx context.Context, t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return c
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redis at %s: %v", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startEtcd starts a one-member etcd in a container, listening on
// 0.0.0.0:2379 and advertising the host port it is published on (chosen
// here, so it stays put across a restart), on network nw as well when it is
// not nil, and terminates it when t ends.
// Its election settings are the fast ones of the embedded test server, which
// make etcd's minimum lease TTL one second.
func startEtcd(ctx context.Context, t *testing.T, nw *testcontainers.DockerNetwork) (ctr testcontainers.Container, endpoint string) {
	t.Helper()
	img := image(etcdImageEnv, defaultEtcdImage)
	requireImage(ctx, t, img)
	for attempt := 1; ; attempt++ {
		ctr, endpoint, err := runEtcd(ctx, t, img, nw)
		if err == nil {
			return ctr, endpoint
		}
		// The free port chosen may have been taken before Docker bound it.
		msg := err.Error()
		if attempt < 3 && (strings.Contains(msg, "already allocated") || strings.Contains(msg, "address already in use")) {
			t.Logf("start %s: %v; trying another port", img, err)
			continue
		}
		startFailed(t, "start "+img, err)
	}
}

// runEtcd runs the etcd container of startEtcd on a free loopback port.
func runEtcd(ctx context.Context, t *testing.T, img string, nw *testcontainers.DockerNetwork) (testcontainers.Container, string, error) {
	port := freeLoopbackPort(t)
	endpoint := net.JoinHostPort(loopback.String(), port)
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithLogger(tclog.TestLogger(t)),
		testcontainers.WithExposedPorts(etcdPort),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort(etcdPort): {{HostIP: loopback, HostPort: port}},
			}
		}),
		testcontainers.WithCmd("/usr/local/bin/etcd",
			"--name", "fencing",
			"--data-dir", "/var/lib/etcd/fencing",
			"--listen-client-urls", "http://0.0.0.0:2379",
			"--advertise-client-urls", "http://"+endpoint,
			"--listen-peer-urls", "http://127.0.0.1:2380",
			"--initial-advertise-peer-urls", "http://127.0.0.1:2380",
			"--initial-cluster", "fencing=http://127.0.0.1:2380",
			"--heartbeat-interval", "10",
			"--election-timeout", "100",
			"--log-level", "warn",
		),
		// The official image is distroless and ours is scratch: no shell for
		// testcontainers' internal port check, so ask etcd itself.
		testcontainers.WithWaitStrategy(loopbackReady(etcdPort, etcdHealthy)),
	}
	if nw != nil {
		opts = append(opts, tcnetwork.WithNetwork([]string{"etcd"}, nw))
	}
	ctr, err := testcontainers.Run(ctx, img, opts...)
	testcontainers.CleanupContainer(t, ctr)
	return ctr, endpoint, err
}

// newEtcdClient returns a client of the etcd at endpoint, closed when t
// ends.
func newEtcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client of %s: %v", endpoint, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// loopbackReady waits until probe succeeds against the container's port as
// published on 127.0.0.1, re-reading the mapping (a restarted container gets
// a new one). testcontainers' own port and HTTP waits dial the host it
// guesses for the engine, which inside a container is the bridge gateway,
// not this machine's loopback.
func loopbackReady(port string, probe func(ctx context.Context, addr string) error) wait.Strategy {
	return wait.ForNop(func(ctx context.Context, target wait.StrategyTarget) error {
		var err error
		for {
			var p network.Port
			if p, err = target.MappedPort(ctx, port); err == nil {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err = probe(pctx, net.JoinHostPort(loopback.String(), p.Port()))
				cancel()
				if err == nil {
					return nil
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not ready on loopback: %w (%w)", port, err, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}).WithStartupTimeout(time.Minute)
}

// redisPong sends PING to the Redis server at addr and wants PONG back (not
// -LOADING while it reads its AOF).
func redisPong(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// etcdHealthy asks the etcd at addr for /health and wants it healthy.
func etcdHealthy(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	if err != nil {
		return err
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("/health: %s %s", resp.Status, body)
	}
	return nil
}

// freeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment
// ago.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// newNetwork creates a Docker network for the test's servers, removed when
// t ends: they are attached to it as well as to the default bridge, which
// publishes their ports.
func newNetwork(ctx context.Context, t *testing.T) *testcontainers.DockerNetwork {
	t.Helper()
	nw, err := tcnetwork.New(ctx)
	testcontainers.CleanupNetwork(t, nw)
	if err != nil {
		startFailed(t, "create a docker network", err)
	}
	return nw
}

// dockerClient returns a Docker client for faults testcontainers has no
// method for (pause), closed when t ends.
func dockerClient(ctx context.Context, t *testing.T) *testcontainers.DockerClient {
	t.Helper()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
