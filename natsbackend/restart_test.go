package natsbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/natsbackend"
	"github.com/fencing-go/fencing/natsbackend/natstest"
)

// restarter kills nats-server with SIGKILL and starts it again on the same
// store (sync_interval: always). The backend (the process using it) lives
// on, its connection reconnecting: NewBackend hands out the one backend, so
// its observations survive as a process's would.
type restarter struct {
	srv *natstest.Server
	b   *natsbackend.Backend
}

func (r *restarter) NewBackend(context.Context, testing.TB) (backend.Backend, error) {
	return keepOpen{r.b}, nil
}

func (r *restarter) Kill(testing.TB) { r.srv.Kill() }

func (r *restarter) Start(t testing.TB) {
	if err := r.srv.Start(); err != nil {
		t.Fatalf("restart nats-server: %v", err)
	}
}

func (r *restarter) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: time.Second, Slack: 500 * time.Millisecond}
}

// keepOpen is the backend with a Close that leaves it open.
type keepOpen struct{ *natsbackend.Backend }

func (keepOpen) Close() error { return nil }

// TestServerFaults runs on a server of its own:
//
//   - Kill: kill -9 of nats-server and a restart on its store lose no
//     token, no live lease and no expiry (conformance.RunRestart);
//   - WaitThroughRestart: waiters wait through it (conformance.RunRestartWait);
//   - KillAfterEveryGrant: a server killed right after each acknowledged
//     grant, and started again, never mints a token at or below one it
//     acknowledged before.
func TestServerFaults(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	b, err := open(js, natstest.Bucket(t, js))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t.Run("Kill", func(t *testing.T) {
		conformance.RunRestart(t, &restarter{srv: srv, b: b})
	})
	t.Run("WaitThroughRestart", func(t *testing.T) {
		conformance.RunRestartWait(t, &restarter{srv: srv, b: b})
	})
	t.Run("KillAfterEveryGrant", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var last uint64
		for round := range 5 {
			req := backend.Request{Key: "killed", LeaseID: "round-" + string(rune('a'+round)), Timeout: time.Minute, Margin: time.Second}
			var l backend.Lease
			for {
				l, err = b.Grant(ctx, req)
				if err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(50 * time.Millisecond) // reconnecting
			}
			if err != nil {
				t.Fatalf("round %d: Grant: %v", round, err)
			}
			if l.Token <= last {
				t.Fatalf("round %d: token %d after an acknowledged %d: a token went back", round, l.Token, last)
			}
			last = l.Token
			srv.Kill()
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			// The lease acknowledged before the crash is there, live.
			for {
				err = b.Release(ctx, req.Key, req.LeaseID)
				if err == nil || errors.Is(err, backend.ErrLeaseNotFound) || errors.Is(err, backend.ErrLeaseExpired) || ctx.Err() != nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("round %d: Release of the lease acknowledged before the crash: %v", round, err)
			}
		}
	})
}
