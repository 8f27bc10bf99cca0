package integration_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/logtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/redisbackend"
)

// failedRenewals returns the level and message of every renewal logged
// since from that did not succeed (one sent before from may succeed after).
func failedRenewals(logs *logtest.Records, from time.Time) []string {
	var out []string
	for _, rec := range logs.All() {
		if rec.Time.After(from) && strings.HasPrefix(rec.Message, "fencing: renew ") {
			out = append(out, rec.Level.String()+" "+rec.Message)
		}
	}
	return out
}

// The same outage logs alike on every backend: with the server stopped
// (frozen, keeping its connections), every renewal attempt that gets no
// answer is "fencing: renew failed" at Warn, never "refused", until the
// lease is lost.
func TestRenewalWithoutAnswerLogsAlikeOnEveryBackend(t *testing.T) {
	cases := []struct {
		name string
		// start returns the backend and a function that stops its server
		// from answering.
		start func(t *testing.T) (backend.Backend, func())
	}{
		{"memory", func(t *testing.T) (backend.Backend, func()) {
			mem := memorybackend.New()
			t.Cleanup(func() { mem.Close() })
			f := &freezable{Backend: mem}
			return f, f.freeze
		}},
		{"etcd", func(t *testing.T) (backend.Backend, func()) {
			m := etcdtest.Start(t)
			p := etcdtest.StartProxy(t, m.ClientURL)
			b, err := etcdbackend.New(context.Background(), etcdtest.NewClient(t, p.Endpoints()), etcdbackend.WithPrefix("renewlog/"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.SetMode(etcdtest.Forward); b.Close() })
			return b, func() { p.SetMode(etcdtest.Pause) }
		}},
		{"redis", func(t *testing.T) (backend.Backend, func()) {
			srv := redistest.Start(t, redistest.Config{AppendOnly: true, AppendFsync: "everysec"})
			client := srv.Client()
			b, err := redisbackend.New(context.Background(), client, redisbackend.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Resume(); b.Close() })
			return b, func() {
				if err := srv.Pause(); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, stop := tc.start(t)
			logs := &logtest.Records{}
			c := fencing.New(b, fencing.WithLogger(slog.New(logs)), fencing.WithRequestTimeout(300*time.Millisecond))
			ctx := context.Background()
			h, err := c.Hold(ctx, "k", 2*time.Second, fencing.WithRenewInterval(400*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			time.Sleep(500 * time.Millisecond) // a renewal confirmed
			stopped := time.Now()
			stop()
			select {
			case <-h.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lease outlived its server by 10s")
			}
			got := failedRenewals(logs, stopped)
			if len(got) == 0 {
				t.Fatal("no renewal logged after the server stopped answering")
			}
			for _, r := range got {
				if r != "WARN fencing: renew failed" {
					t.Fatalf("renewals logged after the server stopped answering: %q, want every one %q", got, "WARN fencing: renew failed")
				}
			}
		})
	}
}

// freezable is an in-memory backend whose "server" can stop answering:
// after freeze, renewals wait for their context to end, as a network
// client's read does.
type freezable struct {
	backend.Backend
	mu     sync.Mutex
	frozen bool
}

func (f *freezable) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = true
}

func (f *freezable) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	f.mu.Lock()
	frozen := f.frozen
	f.mu.Unlock()
	if frozen {
		<-ctx.Done()
		return backend.Lease{}, ctx.Err()
	}
	return f.Backend.Renew(ctx, req)
}
