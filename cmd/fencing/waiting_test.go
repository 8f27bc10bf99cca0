package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// waitState is what a server shows of the waiters on it, read from the
// server itself: its subscriptions (etcd watchers, Redis channels) and the
// grant attempts it has run (etcd Txns, Redis scripts).
type waitState struct{ subs, attempts int }

// waitingFor waits until the server shows one more subscription and one
// more grant attempt than before: a waiter that subscribed, and then
// (it subscribes first) had its first attempt refused, so that only the
// release's notification or its poll can wake it.
func waitingFor(t *testing.T, s server, before waitState) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		now := s.waitState(t)
		if now.subs > before.subs && now.attempts > before.attempts {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: waiter not seen by the server: %+v, before %+v", s.name, now, before)
		}
	}
}

// etcdWaitState reads a member's metrics (its own process: its gauges count
// this member's watchers alone).
func etcdWaitState(m *etcdtest.Member) func(t *testing.T) waitState {
	return func(t *testing.T) waitState {
		t.Helper()
		resp, err := http.Get(m.ClientURL + "/metrics")
		if err != nil {
			t.Fatalf("etcd metrics: %v", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("etcd metrics: %v", err)
		}
		var st waitState
		for _, line := range strings.Split(string(body), "\n") {
			name, value, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			n, _ := strconv.ParseFloat(value, 64)
			switch {
			case name == "etcd_debugging_mvcc_watcher_total":
				st.subs = int(n)
			case strings.HasPrefix(name, `etcd_server_apply_duration_seconds_count{op="Txn"`):
				st.attempts += int(n)
			}
		}
		return st
	}
}

// redisWaitState reads a redis-server's channels and script calls.
func redisWaitState(r *redistest.Server) func(t *testing.T) waitState {
	return func(t *testing.T) waitState {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		chans, err := r.Do(ctx, "pubsub", "channels")
		if err != nil {
			t.Fatalf("PUBSUB CHANNELS: %v", err)
		}
		info, err := r.Do(ctx, "info", "commandstats")
		if err != nil {
			t.Fatalf("INFO commandstats: %v", err)
		}
		list, _ := chans.([]any)
		st := waitState{subs: len(list)}
		text, _ := info.(string)
		for _, line := range strings.Split(text, "\n") {
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if rest, ok := strings.CutPrefix(line, cmd); ok {
					n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
					st.attempts += n
				}
			}
		}
		return st
	}
}
