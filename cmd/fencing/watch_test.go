package main

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

// TestWatchPrefixBetweenReads: on a prefix, a key granted and force-released
// between two reads (its first lease) is reported as "ended" with its token.
func TestWatchPrefixBetweenReads(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		var before leaseJSON // a key that exists, so the first read lists something
		wantJSON(t, &before, s.args("grant", "wp/old", "--ttl", "30s", "--json")...)
		p := start(t, s.args("watch", "--prefix", "wp/", "--interval", "5s", "--json")...)
		var e eventJSON
		if l := p.line(30 * time.Second); json.Unmarshal([]byte(l), &e) != nil || e.Key != "wp/old" || e.Event != "live" {
			t.Fatalf("first line %q, want wp/old live", l)
		}
		// The grant and the release land within one interval (5s).
		var l leaseJSON
		wantJSON(t, &l, s.args("grant", "wp/new", "--ttl", "30s", "--json")...)
		want(t, 0, s.args("release", "wp/new", "--force", "--yes")...)
		line := p.line(30 * time.Second)
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Key != "wp/new" || e.Event != "ended" || e.Token != l.Token {
			t.Errorf("after a grant and release between reads: %q, want wp/new ended with token %d", line, l.Token)
		}
		p.cmd.Process.Signal(os.Interrupt)
		if code := p.wait(10 * time.Second); code != 0 {
			t.Errorf("watch exited %d after SIGINT; stderr:\n%s", code, p.errb.String())
		}
	})
}
