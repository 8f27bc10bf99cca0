package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// A delayed key and a live lease with a lock delay, as get, list and watch
// word them.
func TestLockDelayText(t *testing.T) {
	until := time.Date(2026, 1, 1, 12, 0, 15, 0, time.UTC)
	d := fencing.KeyState{MaxToken: 7, DelayedUntil: until, DelayRemaining: 4200 * time.Millisecond}
	if got, want := describe(d), "delayed until 2026-01-01T12:00:15Z (4.2s left), last token 7"; got != want {
		t.Errorf("describe(delayed) = %q, want %q", got, want)
	}
	live := fencing.KeyState{Live: true, Token: 8, MaxToken: 8, ExpiresAt: until, Remaining: 30 * time.Second, LockDelay: 15 * time.Second, Owner: "w-1"}
	if got, want := describe(live), `live, token 8, 30s left, lock delay 15s, owner "w-1"`; got != want {
		t.Errorf("describe(live with a lock delay) = %q, want %q", got, want)
	}
	j := toStateJSON("k", d)
	if j.Live || j.DelayedUntil == nil || !j.DelayedUntil.Equal(until) || j.DelayRemainingSeconds != 4.2 || j.LockDelaySeconds != 0 {
		t.Errorf("toStateJSON(delayed) = %+v", j)
	}
	if j := toStateJSON("k", live); j.LockDelaySeconds != 15 || j.DelayedUntil != nil {
		t.Errorf("toStateJSON(live with a lock delay) = %+v", j)
	}
	// An ended lease whose delay is over is only free.
	if j := toStateJSON("k", fencing.KeyState{MaxToken: 7}); j.DelayedUntil != nil || describe(fencing.KeyState{MaxToken: 7}) != "free, last token 7" {
		t.Errorf("a free key: %+v, %q", j, describe(fencing.KeyState{MaxToken: 7}))
	}
}

// release --force says that a lease with a lock delay leaves its key closed
// for the delay, and that a key in its delay has nothing to end.
func TestForceReleaseLockDelayText(t *testing.T) {
	var out bytes.Buffer
	live := fencing.KeyState{Live: true, Token: 4, MaxToken: 4, Remaining: time.Minute, LockDelay: 15 * time.Second}
	forceResult(&out, false, "k", true, live)
	until := time.Date(2026, 1, 1, 12, 0, 15, 0, time.UTC)
	forceResult(&out, false, "k", false, fencing.KeyState{MaxToken: 4, DelayedUntil: until, DelayRemaining: 15 * time.Second})
	want := `ended the lease on "k" (token 4); the key stays closed for its lock delay of 15s, then the next grant gets a larger token
"k" had no live lease (delayed until 2026-01-01T12:00:15Z (15s left)); nothing changed
`
	if out.String() != want {
		t.Errorf("release --force printed\n%s\nwant\n%s", out.String(), want)
	}
}

// watch reports a lease with a lock delay that expires as expired, then
// delayed (once, however many reads see the delay), then free when the delay
// is over.
func TestWatchLockDelayEvents(t *testing.T) {
	var out bytes.Buffer
	wt := &watcher{w: &out, jsonOut: true, tol: 250 * time.Millisecond, seen: map[string]*observed{}}
	now := time.Now()
	read := func(st fencing.KeyState, at time.Time) map[string]observed {
		o := observed{st: st, readAt: at}
		if st.Live {
			o.expires = at.Add(st.Remaining)
		}
		return map[string]observed{"k": o}
	}
	until := now.Add(3 * time.Second)
	wt.update(read(fencing.KeyState{Live: true, Token: 1, MaxToken: 1, ExpiresAt: now.Add(time.Second), Remaining: time.Second, LockDelay: 2 * time.Second}, now), true, false)
	delayedAt := func(at time.Time) fencing.KeyState {
		return fencing.KeyState{MaxToken: 1, DelayedUntil: until, DelayRemaining: until.Sub(at)}
	}
	for _, at := range []time.Time{now.Add(1100 * time.Millisecond), now.Add(2 * time.Second)} {
		wt.update(read(delayedAt(at), at), false, false)
	}
	wt.update(read(fencing.KeyState{MaxToken: 1}, now.Add(3100*time.Millisecond)), false, false)
	var events []eventJSON
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e eventJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("watch printed %q: %v", line, err)
		}
		events = append(events, e)
	}
	var names []string
	for _, e := range events {
		names = append(names, e.Event)
	}
	if got := strings.Join(names, " "); got != "live expired delayed free" {
		t.Fatalf("events %q, want %q", got, "live expired delayed free")
	}
	if events[0].LockDelaySeconds != 2 {
		t.Errorf("live event %+v, want lock_delay_seconds 2", events[0])
	}
	if d := events[2]; d.Token != 1 || d.DelayedUntil == nil || !d.DelayedUntil.Equal(until.UTC()) || d.DelayRemainingSeconds != 1.9 {
		t.Errorf("delayed event %+v, want token 1, delayed_until %v and 1.9s left", d, until.UTC())
	}
	if f := events[3]; f.Token != 1 || f.DelayedUntil != nil {
		t.Errorf("free event %+v, want token 1 and no delay", f)
	}
}

// --lock-delay is checked before any request: negative or over the cap is
// a usage error.
func TestLockDelayFlag(t *testing.T) {
	for _, args := range [][]string{
		{"grant", "k", "--ttl", "1s", "--lock-delay", "-1s"},
		{"grant", "k", "--ttl", "1s", "--lock-delay", "61s"},
		{"hold", "k", "--ttl", "1s", "--lock-delay", "-1ns", "--", "true"},
		{"hold", "k", "--ttl", "1s", "--lock-delay", "1m0.000000001s", "--", "true"},
	} {
		r := runBin(t, append(args, "--backend", "memory")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--lock-delay") || !strings.Contains(r.stderr, "invalid lock delay") {
			t.Errorf("fencing %q: want exit 2 naming --lock-delay, got %v", args, r)
		}
	}
}

// On each server: grant --lock-delay stores the delay (get, list show it);
// once the lease expires, get, list and watch show the key delayed until
// its end, grant is refused (exit 3) saying so, and then the key is free
// again; hold --lock-delay releases when its command exits, with no delay.
func TestLockDelay(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		// Whole seconds (etcd's unit); a delay longer than etcd's slack
		// in reporting an expiry, so the checks see the key delayed.
		const delay = 3 * time.Second
		w := start(t, s.args("watch", "ld/a", "--interval", "50ms", "--json")...)
		var l leaseJSON
		wantJSON(t, &l, s.args("grant", "ld/a", "--ttl", "1s", "--margin", "0s", "--lock-delay", delay.String(), "--json")...)
		if l.LockDelaySeconds != delay.Seconds() {
			t.Errorf("grant --json: %+v, want lock_delay_seconds %v", l, delay.Seconds())
		}
		var st stateJSON
		wantJSON(t, &st, s.args("get", "ld/a", "--json")...)
		if st.Live && st.LockDelaySeconds != delay.Seconds() {
			t.Errorf("get --json of a live lease with --lock-delay %v: %+v", delay, st)
		}
		if r := want(t, 0, s.args("list", "ld/")...); st.Live && (!strings.Contains(r.stdout, "DELAY") || !strings.Contains(r.stdout, "3s")) {
			t.Errorf("list does not show the lock delay:\n%s", r.stdout)
		}
		// Poll until the lease has expired and the delay shows.
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st = stateJSON{}
			wantJSON(t, &st, s.args("get", "ld/a", "--json")...)
			if !st.Live {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("get --json: %+v, still live 10s after a 1s lease", st)
			}
		}
		if st.DelayedUntil == nil || st.DelayRemainingSeconds <= 0 || st.DelayRemainingSeconds > delay.Seconds()+1.5 || st.MaxToken != l.Token {
			t.Fatalf("get --json after the lease expired: %+v, want delayed_until and up to %v left", st, delay)
		}
		if r := want(t, 0, s.args("get", "ld/a")...); !strings.Contains(r.stdout, "delayed until ") || !strings.Contains(r.stdout, " left)") {
			t.Errorf("get of a delayed key:\n%s", r.stdout)
		}
		if r := want(t, 0, s.args("list", "ld/")...); !strings.Contains(r.stdout, "delayed until ") {
			t.Errorf("list of a delayed key:\n%s", r.stdout)
		}
		if r := want(t, exitHeld, s.args("grant", "ld/a", "--ttl", "10s")...); !strings.Contains(r.stderr, "in a lock delay") {
			t.Errorf("grant during the lock delay: %v, want exit 3 saying so", r)
		}
		// The delay ends: the watch says so, and a grant succeeds.
		var names []string
		for done := false; !done; {
			var e eventJSON
			line := w.line(30 * time.Second)
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("watch printed %q: %v", line, err)
			}
			names = append(names, e.Event)
			switch e.Event {
			case "granted", "live":
				if e.LockDelaySeconds != delay.Seconds() {
					t.Errorf("watch: %+v, want lock_delay_seconds %v", e, delay.Seconds())
				}
			case "delayed":
				if e.DelayedUntil == nil || e.Token != l.Token {
					t.Errorf("watch: %+v, want delayed_until and token %d", e, l.Token)
				}
			case "free":
				done = len(names) > 1
			}
		}
		if got := strings.Join(names, " "); !strings.Contains(got, "expired delayed free") && !strings.Contains(got, "ended delayed free") {
			t.Errorf("watch events %q, want the lease's end, then delayed, then free", got)
		}
		w.cmd.Process.Signal(os.Interrupt)
		w.wait(10 * time.Second)
		wantJSON(t, &l, s.args("grant", "ld/a", "--ttl", "10s", "--json")...)

		// hold's own release leaves no delay.
		want(t, 0, s.args("hold", "ld/b", "--ttl", "10s", "--lock-delay", "60s", "--", "true")...)
		st = stateJSON{}
		wantJSON(t, &st, s.args("get", "ld/b", "--json")...)
		if st.Live || st.DelayedUntil != nil || st.MaxToken == 0 {
			t.Errorf("get after hold --lock-delay released: %+v, want free, not delayed", st)
		}
		want(t, 0, s.args("grant", "ld/b", "--ttl", "10s")...)
	})
}
