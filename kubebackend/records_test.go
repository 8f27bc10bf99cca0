package kubebackend

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestLeaseNameValidAndDistinct: every key maps to a valid object name, a
// valid name to itself, and a key shaped like a hashed name to a hash.
func TestLeaseNameValidAndDistinct(t *testing.T) {
	keys := []string{"a", "plain-name", "dotted.name", "Capital", "a/b", "\x00", "\xff\xfe", "ünï",
		strings.Repeat("x", 253), strings.Repeat("x", 254), strings.Repeat("k", 1024),
		hashedPrefix + "0", LeaseName("a/b"), "-x", "x-", ".x"}
	names := map[string]string{}
	for _, k := range keys {
		n := LeaseName(k)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Fatalf("LeaseName(%q) = %q, not a valid name: %v", k, n, errs)
		}
		if other, ok := names[n]; ok {
			t.Fatalf("keys %q and %q share the name %q", other, k, n)
		}
		names[n] = k
	}
	if LeaseName("plain-name") != "plain-name" {
		t.Fatal("a valid name is not used verbatim")
	}
}

// TestJudge: a held state is live for its ttl from when it was first seen,
// then delayed for its lock delay; a forced release delays from when it was
// seen; a release frees at once.
func TestJudge(t *testing.T) {
	seen := time.Unix(1000, 0)
	held := record{holder: "h", ours: true, ttl: 2 * time.Second, delay: time.Second}
	for _, c := range []struct {
		r             record
		at            time.Duration
		live, delayed bool
		remaining     time.Duration
	}{
		{held, 0, true, false, 2 * time.Second},
		{held, 2*time.Second - 1, true, false, 1},
		{held, 2 * time.Second, false, true, time.Second},
		{held, 3 * time.Second, false, false, 0},
		{record{forced: true, delay: time.Second}, 999 * time.Millisecond, false, true, time.Millisecond},
		{record{forced: true, delay: time.Second}, time.Second, false, false, 0},
		{record{ours: true}, 0, false, false, 0},
	} {
		s := judge(c.r, seen, seen.Add(c.at))
		if s.live != c.live || s.delayed != c.delayed || s.remaining != c.remaining {
			t.Fatalf("judge(%+v) at %v = live %v, delayed %v, remaining %v; want %v, %v, %v",
				c.r, c.at, s.live, s.delayed, s.remaining, c.live, c.delayed, c.remaining)
		}
	}
}

// TestObserveKeepsFirstSight: a state seen again keeps its first time; a
// new state starts afresh.
func TestObserveKeepsFirstSight(t *testing.T) {
	b := &Backend{seen: map[string]observation{}}
	t0 := time.Unix(1, 0)
	if got := b.observe("n", "5", t0); !got.Equal(t0) {
		t.Fatal(got)
	}
	if got := b.observe("n", "5", t0.Add(time.Second)); !got.Equal(t0) {
		t.Fatalf("a state seen again got %v, want its first sight %v", got, t0)
	}
	if got := b.observe("n", "6", t0.Add(2*time.Second)); !got.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("a new state got %v", got)
	}
}

// TestNextToken: the replaced state's resourceVersion, or one more than
// the stored token when that is larger.
func TestNextToken(t *testing.T) {
	if got := nextToken(record{rvNum: 900, token: 898}); got != 900 {
		t.Fatalf("nextToken = %d, want 900", got)
	}
	if got := nextToken(record{rvNum: 5, token: 898}); got != 899 {
		t.Fatalf("nextToken over a restored Lease = %d, want 899", got)
	}
}
