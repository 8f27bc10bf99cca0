package etcdbackend_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// TestReleasedLeaseReused: the etcd lease a release freed carries the next
// grant of the same seconds, renewed to its full TTL by a keep-alive sent
// during that grant, and the lease's ExpiresAt counts from that keep-alive.
func TestReleasedLeaseReused(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	mustGrant(t, b, req("a", "A", 3*time.Second)) // 4s etcd lease
	first := leaseOf(t, cli, prefix, "a")
	time.Sleep(2 * time.Second) // half its TTL gone
	if err := b.Release(ctx, "a", "A"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	l := mustGrant(t, b, req("b", "B", 3*time.Second))
	if got := leaseOf(t, cli, prefix, "b"); got != first {
		t.Fatalf("grant after a release got etcd lease %x, want the released %x", got, first)
	}
	ttl, err := cli.TimeToLive(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	// Without the keep-alive about 2s would be left (read as 1 or 2).
	if ttl.TTL < 3 {
		t.Fatalf("reused etcd lease has %ds left, want its TTL (4s) renewed", ttl.TTL)
	}
	if l.ExpiresAt.Before(before.Add(4*time.Second)) || l.ExpiresAt.After(time.Now().Add(4*time.Second)) {
		t.Fatalf("ExpiresAt %v, want 4s after the grant's keep-alive (grant began %v)", l.ExpiresAt, before)
	}
	// Other seconds: a lease of its own.
	mustGrant(t, b, req("c", "C", 10*time.Second))
	if got := leaseOf(t, cli, prefix, "c"); got == first {
		t.Fatal("a grant of other seconds reused a pooled etcd lease")
	}
}

// TestForceReleasedLeaseRevoked: a forced release revokes its etcd lease and
// never hands it to another grant.
func TestForceReleasedLeaseRevoked(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	mustGrant(t, b, req("a", "A", time.Minute))
	first := leaseOf(t, cli, prefix, "a")
	if ok, err := b.ForceRelease(ctx, "a"); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	mustGrant(t, b, req("b", "B", time.Minute))
	if got := leaseOf(t, cli, prefix, "b"); got == first {
		t.Fatal("a grant reused the etcd lease of a forcibly released lease")
	}
	if ttl, err := cli.TimeToLive(ctx, first); err != nil || ttl.TTL != -1 {
		t.Fatalf("forcibly released etcd lease: TTL %v, %v; want revoked", ttl, err)
	}
}

// TestPooledLeaseGoneNotReused: a pooled etcd lease that ended behind the
// backend's back (revoked here; expiry is the same to etcd) is dropped, and
// the grant gets a live lease that holds its key.
func TestPooledLeaseGoneNotReused(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	mustGrant(t, b, req("a", "A", time.Minute))
	first := leaseOf(t, cli, prefix, "a")
	if err := b.Release(ctx, "a", "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, first); err != nil {
		t.Fatal(err)
	}
	l := mustGrant(t, b, req("b", "B", time.Minute))
	got := leaseOf(t, cli, prefix, "b")
	if got == first {
		t.Fatal("a grant reused a revoked etcd lease")
	}
	if ttl, err := cli.TimeToLive(ctx, got); err != nil || ttl.TTL < 50 {
		t.Fatalf("new etcd lease: %v, %v; want about 61s left", ttl, err)
	}
	wantToken(t, b, "b", l.Token, true)
}

// TestConcurrentGrantsNeverShareLease: grants and releases on many
// goroutines, with the pool in play, never put two live keys on one etcd
// lease.
func TestConcurrentGrantsNeverShareLease(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	const workers, rounds = 16, 8
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for w := range workers {
			wg.Go(func() {
				_, errs[w] = b.Grant(ctx, req(fmt.Sprint("k", w), fmt.Sprint("L", r, "-", w), time.Minute))
			})
		}
		wg.Wait()
		owner := make(map[clientv3.LeaseID]int)
		for w := range workers {
			if errs[w] != nil {
				t.Fatalf("round %d: grant %d: %v", r, w, errs[w])
			}
			id := leaseOf(t, cli, prefix, fmt.Sprint("k", w))
			if o, dup := owner[id]; dup {
				t.Fatalf("round %d: keys k%d and k%d on one etcd lease %x", r, o, w, id)
			}
			owner[id] = w
		}
		for w := range workers {
			wg.Go(func() { errs[w] = b.Release(ctx, fmt.Sprint("k", w), fmt.Sprint("L", r, "-", w)) })
		}
		wg.Wait()
		for w := range workers {
			if errs[w] != nil {
				t.Fatalf("round %d: release %d: %v", r, w, errs[w])
			}
		}
	}
}
