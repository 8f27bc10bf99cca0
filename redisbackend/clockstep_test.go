package redisbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// TestServerClockSteps runs conformance.RunClockStep on a redis-server
// whose wall clock an LD_PRELOAD shim pins (libfaketime breaks
// redis-server).
func TestServerClockSteps(t *testing.T) {
	clock := redistest.NewPinnedClock(t)
	cfg := persistent
	cfg.Env = clock.Env()
	srv := redistest.Start(t, cfg)
	t.Cleanup(func() { clock.Free(t) }) // before the server stops
	conformance.RunClockStep(t, &pinnedRedis{clock: clock, client: srv.Client()})
}

// pinnedRedis is a conformance.ClockStepper on a redis-server under a
// redistest.PinnedClock.
type pinnedRedis struct {
	clock  *redistest.PinnedClock
	client redis.UniversalClient
}

func (r *pinnedRedis) NewBackend(ctx context.Context, _ testing.TB) (backend.Backend, error) {
	return redisbackend.New(ctx, r.client, redisbackend.WithLogger(quietLogger()))
}

// StepClock pins the server's clock at offset from ours: it stands still
// there until the next step.
func (r *pinnedRedis) StepClock(t testing.TB, offset time.Duration) {
	t.Helper()
	at := time.Now().Add(offset)
	r.clock.Pin(t, at)
	st, err := r.client.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Equal(at.Truncate(time.Microsecond)) {
		t.Fatalf("the server's TIME is %v after pinning it at %v: the shim does not work", st, at)
	}
}
