package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// PresetToken implements conformance.TokenPresetter for the Redis
// container.
func (h *redisHarness) PresetToken(ctx context.Context, b backend.Backend, key string, token uint64) error {
	return redistest.PresetToken(ctx, h.client, b, key, token)
}

// TestIntegrationFaultHistories runs the fault workload of package
// conformance on servers in containers while Docker freezes them (docker
// pause, longer than a lease) and, for etcd, kills them (SIGKILL) and starts
// them again, and checks each history against the lease model: the calls
// the faults cut off must have been classified right.
func TestIntegrationFaultHistories(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := context.Background()
	requireImage(ctx, t, image(redisImageEnv, defaultRedisImage))
	requireImage(ctx, t, image(etcdImageEnv, defaultEtcdImage))
	docker := dockerClient(ctx, t)
	pause := func(t *testing.T, ctr testcontainers.Container, d time.Duration) {
		if _, err := docker.ContainerPause(ctx, ctr.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
			t.Errorf("pause: %v", err)
			return
		}
		time.Sleep(d)
		if _, err := docker.ContainerUnpause(ctx, ctr.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
			t.Errorf("unpause: %v", err)
		}
	}

	t.Run("RedisPaused", func(t *testing.T) {
		ctr := startRedis(ctx, t, nil, "--appendonly", "yes", "--appendfsync", "always")
		addr := hostPort(ctx, t, ctr, redisPort)
		var bs []backend.Backend
		for range 4 {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			bs = append(bs, newRedisBackend(ctx, t, c, "faults:"))
		}
		traits := (&redisHarness{}).Traits()
		faultHistory(t, bs, traits, 300*time.Millisecond, func() { pause(t, ctr, 1500*time.Millisecond) })
	})

	t.Run("EtcdPausedAndKilled", func(t *testing.T) {
		ctr, endpoint := startEtcd(ctx, t, nil)
		var bs []backend.Backend
		for range 4 {
			bs = append(bs, newEtcdBackend(t, newEtcdClient(t, endpoint), "faults/"))
		}
		traits := (&etcdHarness{}).Traits()
		// A restarted etcd gives every lease its full TTL again: a lease may
		// outlive its TTL by the time the server was down, and one more TTL.
		traits.Slack += 10 * time.Second
		faultHistory(t, bs, traits, 800*time.Millisecond, func() {
			pause(t, ctr, 2500*time.Millisecond)
			time.Sleep(time.Second)
			if _, err := docker.ContainerKill(ctx, ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
				t.Errorf("kill: %v", err)
				return
			}
			time.Sleep(500 * time.Millisecond)
			if err := ctr.Start(ctx); err != nil {
				t.Errorf("restart: %v", err)
			}
			time.Sleep(time.Second)
		})
	})
}

// faultHistory runs the workload on bs while fault runs (after a second of
// calls, and for a second more after it), then checks the history.
func faultHistory(t *testing.T, bs []backend.Backend, traits conformance.Traits, timeout time.Duration, fault func()) {
	t.Helper()
	rec := conformance.NewRecorder(nil)
	w := conformance.Workload{Keys: []string{"k0", "k1", "k2"}, Timeout: timeout, Margin: timeout / 4, CallTimeout: time.Second, Seed: 3}
	w.RunAround(t, rec, bs, fault)
	conformance.CheckLinearizable(t, rec.History(), traits)
}
