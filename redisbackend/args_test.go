package redisbackend

import (
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// TestNames: a key's names, encoded in pieces without allocating (see
// writeName), are prefix, '{', the key's whole unpadded base64url encoding
// and the suffix, for keys of every length around the piece size; and the
// record and channel names that Release makes together cost one allocation.
func TestNames(t *testing.T) {
	b := &Backend{prefix: "p:"}
	for n := range 200 {
		key := strings.Repeat("\xff\x00é", n)[:n]
		want := b.prefix + "{" + keyEncoding.EncodeToString([]byte(key))
		if got := b.RedisKey(key); got != want+recordSuffix {
			t.Fatalf("RedisKey of a %d-byte key = %q, want %q", n, got, want+recordSuffix)
		}
		rk, ch := b.names(key, recordSuffix, channelSuffix)
		if rk != want+recordSuffix || ch != want+channelSuffix {
			t.Fatalf("names of a %d-byte key = %q, %q; want %q, %q", n, rk, ch, want+recordSuffix, want+channelSuffix)
		}
	}
	key := strings.Repeat("k", 100)
	if a := testing.AllocsPerRun(100, func() { b.names(key, recordSuffix, channelSuffix) }); a != 1 {
		t.Errorf("names allocates %v times, want 1", a)
	}
}

// TestTimeArgs: the time arguments reused from the last request (see
// timeArgs) are those of the request at hand whichever of its times
// differ, and a repeated request's allocate nothing.
func TestTimeArgs(t *testing.T) {
	b := &Backend{}
	reqs := []backend.Request{
		{Timeout: time.Minute, Margin: time.Second},
		{Timeout: time.Minute, Margin: time.Second},
		{Timeout: time.Minute + time.Microsecond, Margin: time.Second},
		{Timeout: time.Minute, Margin: time.Second + 1},
		{Timeout: time.Minute, Margin: time.Second, LockDelay: 1500 * time.Nanosecond},
		{Timeout: time.Minute, Margin: time.Second},
	}
	for i, r := range reqs {
		ttl := ceil(r.Timeout, time.Millisecond)
		d := b.timeArgs(r)
		got := []any{d.ttl, d.ttlMs, d.marginNs, d.totalUs, d.delayUs}
		want := []any{ttl, ttl.Milliseconds(), int64(r.Margin), ceil(ttl+r.Margin, time.Microsecond).Microseconds(), ceil(r.LockDelay, time.Microsecond).Microseconds()}
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("request %d (%+v): argument %d = %v, want %v", i, r, j, got[j], want[j])
			}
		}
	}
	if a := testing.AllocsPerRun(100, func() { b.timeArgs(reqs[0]) }); a != 0 {
		t.Errorf("a repeated request's time arguments allocate %v times, want 0", a)
	}
}
