package conformance

import (
	"strings"
	"testing"
	"time"
)

// The history checker must flag each kind of violation, or the randomized
// test could pass a broken backend.
func TestCheckHistory(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// op builds an event that ran over [from, to] ms and, for grants and
	// renewals, proves the lease live until `until` ms.
	op := func(what string, token uint64, from, to, until int) event {
		return event{key: "k", token: token, id: what + string(rune('a'+token)), what: what,
			start: at(from), end: at(to), endCoord: at(to), until: at(until)}
	}
	cases := []struct {
		name   string
		events []event
		want   string // "" for a valid history, else part of the error
	}{
		{"valid: expiry then regrant", []event{
			op("grant", 1, 0, 1, 50), op("token", 1, 10, 11, 0), op("renew", 1, 20, 21, 70),
			op("grant", 2, 80, 81, 130), op("token", 2, 90, 91, 0),
		}, ""},
		{"valid: release then regrant", []event{
			op("grant", 1, 0, 1, 500), op("release", 1, 10, 10, 0), op("grant", 2, 20, 21, 520),
		}, ""},
		{"token granted twice", []event{
			op("grant", 1, 0, 1, 50), op("grant", 1, 100, 101, 150),
		}, "granted twice"},
		{"tokens out of real-time order", []event{
			op("grant", 2, 0, 1, 50), op("grant", 1, 100, 101, 150),
		}, "finished before"},
		{"grant while the earlier lease was live", []event{
			op("grant", 1, 0, 1, 500), op("grant", 2, 20, 21, 520),
		}, "was granted while"},
		{"older lease seen live after a newer one", []event{
			op("grant", 1, 0, 1, 5), op("grant", 2, 10, 11, 50), op("token", 2, 12, 13, 0),
			op("token", 1, 20, 21, 0),
		}, "two live leases"},
		{"token from no grant", []event{
			op("grant", 1, 0, 1, 50), op("token", 7, 10, 11, 0),
		}, "no grant returned"},
	}
	for _, c := range cases {
		err := checkHistory(c.events)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want no violation", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want a violation mentioning %q", c.name, err, c.want)
		}
	}
}
