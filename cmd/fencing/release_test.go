package main

import (
	"strings"
	"testing"
)

// TestReleaseTwice: "ended" says whether this release ended a live lease:
// true (with its token) the first time, false for the repeat, which
// succeeds and changes nothing.
func TestReleaseTwice(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		var l leaseJSON
		wantJSON(t, &l, s.args("grant", "twice", "--ttl", "10s", "--json")...)
		var first, again releaseJSON
		wantJSON(t, &first, s.args("release", "twice", "--lease-id", l.LeaseID, "--json")...)
		if !first.Ended || first.Forced || first.Token != l.Token {
			t.Errorf("first release: %+v, lease token %d; want ended with its token", first, l.Token)
		}
		wantJSON(t, &again, s.args("release", "twice", "--lease-id", l.LeaseID, "--json")...)
		if again.Ended || again.Token != 0 {
			t.Errorf("repeated release: %+v; want not ended", again)
		}
		if r := want(t, 0, s.args("release", "twice", "--lease-id", l.LeaseID)...); !strings.Contains(r.stdout, "released already") {
			t.Errorf("repeated release in text: %v", r)
		}
	})
}
