package etcdbackend_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// TestUnknownGrantLeaseNotReused: the etcd lease of a grant whose Txn
// outcome is unknown may hold that key, so it never carries another grant.
// Grants are cut short with tiny deadlines until some Txns took effect
// with their answers lost; the next grant of the same seconds, on another
// key, must get an etcd lease of its own (sharing one would let either
// holder's renewals keep the other's lease alive).
func TestUnknownGrantLeaseNotReused(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	applied := 0
	for i := 0; i < 400 && applied < 3; i++ {
		key := fmt.Sprint("amb", i)
		r := req(key, "A", time.Minute)
		short, cancel := context.WithTimeout(ctx, time.Duration(i%40)*100*time.Microsecond)
		_, err := b.Grant(short, r)
		cancel()
		if err == nil {
			if err := b.Release(ctx, key, "A"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			continue // cut short before the Txn: nothing happened
		}
		other := fmt.Sprint("other", i)
		mustGrant(t, b, req(other, "O", time.Minute))
		resp, err := cli.Get(ctx, prefix+base64.RawURLEncoding.EncodeToString([]byte(key))+"/l")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 1 { // the lost Txn took effect
			applied++
			if id := leaseOf(t, cli, prefix, other); int64(id) == resp.Kvs[0].Lease {
				t.Fatalf("grant on %q got etcd lease %x, which the unknown grant on %q attached its key to", other, id, key)
			}
		}
		if err := b.Release(ctx, other, "O"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Grant(ctx, r); err == nil { // settle the unknown grant
			b.Release(ctx, key, "A")
		}
	}
	if applied == 0 {
		t.Fatal("no grant Txn took effect with its answer lost: the test proved nothing")
	}
}
