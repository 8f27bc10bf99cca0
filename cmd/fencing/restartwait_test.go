package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// TestHoldWaitThroughRestart: `hold --wait` waits through a kill -9 and
// restart of the server (redis-server, etcd), and gets the key once the
// holder releases it; one whose --wait-timeout ends while the server is
// down exits 5 (the server did not answer), not 1 and not 3.
func TestHoldWaitThroughRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and etcd")
	}
	r := redistest.Start(t, redistest.Config{AppendOnly: true})
	m := etcdtest.Start(t, etcdtest.WithFsync())
	for _, c := range []struct {
		s             server
		kill, restart func()
		refused       string // in the error of a wait that ended while the server was down
	}{
		{server{"redis", []string{"--redis-addr", r.Addr()}, redisWaitState(r)}, r.Kill, r.Restart, "connection refused"},
		{server{"etcd", []string{"--etcd-endpoints", m.ClientURL}, etcdWaitState(m)}, m.Kill, func() {
			if err := m.Start(); err != nil {
				t.Fatalf("start etcd: %v", err)
			}
		}, "no answer"},
	} {
		s := c.s
		t.Run(s.name, func(t *testing.T) {
			t.Run("GetsTheKey", func(t *testing.T) {
				var first leaseJSON
				wantJSON(t, &first, s.args("grant", "restart", "--ttl", "60s", "--json")...)
				before := s.waitState(t)
				p := start(t, s.args("hold", "restart", "--ttl", "5s", "--wait", "--", "sh", "-c", `echo "$FENCING_TOKEN"`)...)
				waitingFor(t, s, before) // subscribed and refused once
				c.kill()
				// Down past hold's fallback poll (at most a second): it
				// tries, and is refused, while the server is down.
				select {
				case <-p.done:
					c.restart()
					t.Fatalf("hold --wait exited while the server was down: %v; stderr:\n%s", p.err, p.errb.String())
				case <-time.After(3 * time.Second):
				}
				c.restart()
				want(t, 0, s.args("release", "restart", "--lease-id", first.LeaseID)...)
				var token uint64
				fmt.Sscan(p.line(30*time.Second), &token)
				if code := p.wait(30 * time.Second); code != 0 || token <= first.Token {
					t.Errorf("hold --wait through a restart: exit %d, token %d after %d; stderr:\n%s", code, token, first.Token, p.errb.String())
				}
			})

			t.Run("DownPastWaitTimeout", func(t *testing.T) {
				want(t, 0, s.args("grant", "down", "--ttl", "60s")...)
				before := s.waitState(t)
				const waitTimeout = 3 * time.Second
				began := time.Now()
				p := start(t, s.args("hold", "down", "--ttl", "5s", "--wait", "--wait-timeout", waitTimeout.String(), "--", "true")...)
				waitingFor(t, s, before)
				c.kill()
				defer c.restart()
				code := p.wait(time.Minute)
				took := time.Since(began)
				stderr := p.errb.String()
				if code != exitUnreachable || took < waitTimeout || !strings.Contains(stderr, "did not answer") || !strings.Contains(stderr, c.refused) {
					t.Fatalf("hold --wait with the server down past --wait-timeout %v: exit %d after %v, want exit %d after the timeout, saying the server did not answer (%s); stderr:\n%s",
						waitTimeout, code, took.Round(time.Millisecond), exitUnreachable, c.refused, stderr)
				}
				t.Logf("exit %d after %v: %s", code, took.Round(time.Millisecond), stderr)
			})
		})
	}
}
