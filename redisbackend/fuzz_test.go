package redisbackend

import (
	"strings"
	"testing"
)

// FuzzRedisKey: a user key's hash name (RedisKey) decodes back to it, two
// distinct user keys share no Redis key (hash, line keys or channel), no
// other name decodes as a record, and, for every prefix New accepts, a
// key's hash, line keys and channels share one hash tag (one Cluster slot,
// so the scripts may touch them all). The seed corpus is in
// testdata/fuzz/FuzzRedisKey.
func FuzzRedisKey(f *testing.F) {
	f.Add("fencing:", "a", "b")
	f.Add("", "a}:token", "a")
	f.Add("{x}", "Café", "Café")
	f.Add("p:", "ab", "abc")
	f.Add("x{}", "a", "b") // refused by New: an empty hash tag
	f.Add("{app}:", "a", "b")
	f.Fuzz(func(t *testing.T, prefix, k1, k2 string) {
		if k1 == "" || k2 == "" {
			return // the coordinator refuses empty keys
		}
		if checkPrefix(prefix) != nil {
			return // New refuses it
		}
		b := &Backend{prefix: prefix}
		h1, c1 := b.RedisKey(k1), b.channel(k1)
		if got, ok := b.decodeKey(h1); !ok || got != k1 {
			t.Fatalf("decodeKey(%q) = %q, %v; want %q", h1, got, ok, k1)
		}
		if got, ok := b.decodeKey(c1); ok {
			t.Fatalf("the channel %q decodes as the record of %q", c1, got)
		}
		// The line's keys and a waiter's turn channel (k2 as its ID) too.
		names := append([]string{h1, c1, b.turnChannel(k1, k2)}, b.lineKeys(k1)...)
		for _, n := range names[1:] {
			if hashTag(n) != hashTag(h1) {
				t.Fatalf("hash tags of %q (%q) and %q (%q) differ", h1, hashTag(h1), n, hashTag(n))
			}
			if got, ok := b.decodeKey(n); ok {
				t.Fatalf("%q decodes as the record of %q", n, got)
			}
		}
		if k1 != k2 {
			others := append([]string{b.RedisKey(k2), b.channel(k2), b.turnChannel(k2, k2)}, b.lineKeys(k2)...)
			for _, n := range names {
				for _, o := range others {
					if n == o {
						t.Fatalf("keys %q and %q share a Redis key or channel: %q", k1, k2, n)
					}
				}
			}
		}
	})
}

// hashTag returns the part of a Redis key that Cluster hashes: between the
// first '{' and the next '}' when that is not empty, else the whole key.
func hashTag(k string) string {
	_, rest, ok := strings.Cut(k, "{")
	if !ok {
		return k
	}
	tag, _, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return k
	}
	return tag
}

// TestPrefixWithEmptyHashTag: New refuses a prefix whose first '{' opens an
// empty hash tag, and accepts other braces.
func TestPrefixWithEmptyHashTag(t *testing.T) {
	for prefix, bad := range map[string]bool{"x{}": true, "{}": true, "{app}:": false, "a{": false, "a}{": false, "a{b}{}": false} {
		if got := checkPrefix(prefix) != nil; got != bad {
			t.Errorf("checkPrefix(%q) refused = %v, want %v", prefix, got, bad)
		}
	}
}
