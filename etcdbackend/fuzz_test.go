package etcdbackend

import (
	"strings"
	"testing"
	"time"
)

// FuzzKeys: the etcd keys of a user key decode back to it (splitRecord and
// the encoding), two distinct user keys share no etcd key and neither key's
// records fall in the other's range (so a range read of one never returns
// the other's), a user key's encoding begins with encodedPrefix of each of
// its prefixes (List relies on it), and a lease record's value round-trips.
// The seed corpus is in testdata/fuzz/FuzzKeys.
func FuzzKeys(f *testing.F) {
	f.Add("p/", "a", "b", int64(2), "id")
	f.Add("", "a/l", "a", int64(1), "x:y")
	f.Add("fencing/", "Café", "Café", int64(60), "")
	f.Add("x", "ab", "abc", int64(0), "v1:1:1:1:1")
	f.Fuzz(func(t *testing.T, prefix, k1, k2 string, secs int64, leaseID string) {
		if k1 == "" || k2 == "" {
			return // the coordinator refuses empty keys
		}
		b := &Backend{prefix: prefix}
		r1, r2 := b.keys(k1), b.keys(k2)
		for _, rec := range []struct{ etcdKey, name string }{{r1.lease, leaseRecord}, {r1.id, idRecord}, {r1.released, releasedRecord}} {
			enc, name, ok := splitRecord(prefix, rec.etcdKey)
			if !ok || name != rec.name {
				t.Fatalf("splitRecord(%q, %q) = %q, %q, %v; want record %q", prefix, rec.etcdKey, enc, name, ok, rec.name)
			}
			got, err := encoding.DecodeString(enc)
			if err != nil || string(got) != k1 {
				t.Fatalf("the etcd key %q decodes to %q, %v; want %q", rec.etcdKey, got, err, k1)
			}
		}
		if k1 != k2 {
			base1 := strings.TrimSuffix(r1.lease, leaseRecord)
			base2 := strings.TrimSuffix(r2.lease, leaseRecord)
			for _, a := range []string{r1.lease, r1.id, r1.released} {
				for _, c := range []string{r2.lease, r2.id, r2.released} {
					if a == c {
						t.Fatalf("keys %q and %q share the etcd key %q", k1, k2, a)
					}
				}
				if strings.HasPrefix(a, base2) {
					t.Fatalf("the record %q of %q lies in the range of %q (%q)", a, k1, k2, base2)
				}
			}
			if strings.HasPrefix(r2.lease, base1) {
				t.Fatalf("the record %q of %q lies in the range of %q (%q)", r2.lease, k2, k1, base1)
			}
		}
		enc := encoding.EncodeToString([]byte(k1))
		for i := 0; i <= len(k1); i++ {
			if p := encodedPrefix(k1[:i]); !strings.HasPrefix(enc, p) {
				t.Fatalf("encoding %q of %q does not begin with encodedPrefix(%q) = %q", enc, k1, k1[:i], p)
			}
		}
		m := meta{asked: secs, granted: secs + 1, margin: time.Duration(secs) * time.Millisecond, leaseID: leaseID}
		if got, err := decodeMeta([]byte(m.encode())); err != nil || got != m {
			t.Fatalf("decodeMeta(encode(%+v)) = %+v, %v", m, got, err)
		}
		m.owner = k2 // any bytes: the length prefix, not a separator, ends it
		if got, err := decodeMeta([]byte(m.encode())); err != nil || got != m {
			t.Fatalf("decodeMeta(encode(%+v)) = %+v, %v", m, got, err)
		}
	})
}
