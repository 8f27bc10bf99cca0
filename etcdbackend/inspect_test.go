package etcdbackend_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// TestIDRecordRevisionIsMaxToken: the ID record is written only by the
// grant that creates a lease key, so its ModRevision is the most recent
// token; renewals (also those that move the key to a new etcd lease),
// releases and forced releases never write it.
func TestIDRecordRevisionIsMaxToken(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	idRev := func() uint64 {
		t.Helper()
		resp, err := cli.Get(ctx, prefix+base64.RawURLEncoding.EncodeToString([]byte("k"))+"/i")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("ID record: %v, %v", resp, err)
		}
		return uint64(resp.Kvs[0].ModRevision)
	}
	l := mustGrant(t, b, req("k", "A", time.Minute))
	for _, timeout := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Second} {
		if _, err := b.Renew(ctx, req("k", "A", timeout)); err != nil {
			t.Fatal(err)
		}
		if got := idRev(); got != l.Token {
			t.Fatalf("after a renewal for %v: ID record at revision %d, token %d", timeout, got, l.Token)
		}
	}
	if err := b.Release(ctx, "k", "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant(ctx, req("k", "A", time.Minute)); err == nil { // a resend after the release
		t.Fatal("resent grant after release succeeded")
	}
	st, err := b.Inspect(ctx, "k")
	if err != nil || st.Live || st.MaxToken != l.Token || idRev() != l.Token {
		t.Fatalf("after release: %+v, %v; ID record at %d; want MaxToken %d", st, err, idRev(), l.Token)
	}
	l2 := mustGrant(t, b, req("k", "B", time.Minute))
	if _, err := b.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Inspect(ctx, "k"); err != nil || st.MaxToken != l2.Token || idRev() != l2.Token {
		t.Fatalf("after a forced release: %+v, %v, want MaxToken %d", st, err, l2.Token)
	}
}

// TestInspectRemaining: etcd reports time left in whole seconds, rounded
// down.
func TestInspectRemaining(t *testing.T) {
	cli := etcdtest.Client(t)
	b, _ := newBackend(t, cli)
	l := mustGrant(t, b, backend.Request{Key: "k", LeaseID: "A", Timeout: 9 * time.Second, Margin: time.Second})
	before := time.Now()
	st, err := b.Inspect(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Live || st.Token != l.Token || st.Remaining < 8*time.Second || st.Remaining > 10*time.Second ||
		st.Remaining%time.Second != 0 || st.ExpiresAt.Before(before.Add(st.Remaining)) {
		t.Fatalf("Inspect = %+v, want live, token %d, 8-10 whole seconds left", st, l.Token)
	}
}

// TestListEncodedOrder lists keys whose encodings interleave (a 3-byte key
// whose encoding is a prefix of another's followed by '-', which sorts
// before the '/' of the records) and prefixes that end inside a base64
// character, with every page size: each key once, exactly the keys with the
// prefix.
func TestListEncodedOrder(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	keys := []string{"abc", "abc\xf8", "abc\xf8x", "abcd", "ab", "a", "b", "\x00", "\xff\xfe", "abc/", "a-b", "zz"}
	for i, k := range keys {
		mustGrant(t, b, req(k, fmt.Sprint("L", i), time.Minute))
		if i%3 == 0 {
			if err := b.Release(ctx, k, fmt.Sprint("L", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Something under the prefix that is not ours is skipped.
	if _, err := cli.Put(ctx, prefix+"not-ours", "x"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "a", "ab", "abc", "abc\xf8", "\xff", "q"} {
		var want []string
		for _, k := range keys {
			if strings.HasPrefix(k, p) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		for _, limit := range []int{1, 2, 3, 100} {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > len(keys)+1 {
					t.Fatalf("prefix %q limit %d: more pages than keys", p, limit)
				}
				page, next, err := b.List(ctx, p, cursor, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit {
					t.Fatalf("prefix %q: page of %d, limit %d", p, len(page), limit)
				}
				for _, ki := range page {
					got = append(got, ki.Key)
					if ki.State.MaxToken == 0 || ki.State.Live && (ki.State.Remaining <= 0 || ki.State.Token != ki.State.MaxToken) {
						t.Fatalf("key %q: state %+v", ki.Key, ki.State)
					}
				}
				if next == "" {
					break
				}
				cursor = next
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("prefix %q limit %d: listed %q, want %q", p, limit, got, want)
			}
		}
	}
}
