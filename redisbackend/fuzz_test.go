package redisbackend

import (
	"strings"
	"testing"
)

// FuzzRedisKey: a user key's hash name (RedisKey) decodes back to it, two
// distinct user keys share no Redis key (hash or channel), a channel never
// decodes as a record, and, for every prefix New accepts, a key's hash and
// channel share one hash tag (one Cluster slot, so the scripts may touch
// both). The seed corpus is in
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
		if hashTag(h1) != hashTag(c1) {
			t.Fatalf("hash tags of %q (%q) and %q (%q) differ", h1, hashTag(h1), c1, hashTag(c1))
		}
		if k1 != k2 {
			h2, c2 := b.RedisKey(k2), b.channel(k2)
			if h1 == h2 || c1 == c2 || h1 == c2 || c1 == h2 {
				t.Fatalf("keys %q and %q share a Redis key: %q %q / %q %q", k1, k2, h1, c1, h2, c2)
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
