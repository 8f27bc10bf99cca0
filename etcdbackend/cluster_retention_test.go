package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// TestClusterRetention: on a 3-member cluster, keys are reclaimed while
// the leader is killed in the middle of the pass that deletes them, and
// again before every member is restarted; each round's tokens are above
// every token their keys had before, and a round of old lease IDs resent
// after the reclaims gets new leases, never an old token.
func TestClusterRetention(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3, etcdtest.WithFsync())
	ctx := context.Background()
	const prefix = "retention/"
	keys := []string{"r0", "r1", "r2", "r3", "r4", "r5"}

	var arm atomic.Bool
	var killed atomic.Pointer[etcdtest.Member]
	beforeTxn := func(deletes int) {
		if deletes > 0 && arm.CompareAndSwap(true, false) {
			if m := cl.Leader(); m != nil {
				m.Kill()
				killed.Store(m)
			}
		}
	}
	open := func(hooks ...etcdbackend.Option) *etcdbackend.Backend {
		cli := etcdtest.NewClient(t, cl.Endpoints())
		opts := append([]etcdbackend.Option{etcdbackend.WithPrefix(prefix), etcdbackend.WithRetention(retained)}, hooks...)
		nctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		b, err := etcdbackend.New(nctx, cli, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b := open(etcdbackend.WithSweepHooks(beforeTxn, nil))

	// grant grants r, resending it through errors of a cluster in
	// failover (a resend answers an ambiguous first attempt).
	grant := func(b backend.Backend, r backend.Request) backend.Lease {
		t.Helper()
		start := time.Now()
		for {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			l, err := b.Grant(gctx, r)
			cancel()
			switch {
			case err == nil:
				return l
			case errors.Is(err, backend.ErrLeaseExpired), errors.Is(err, backend.ErrLeaseNotFound), errors.Is(err, backend.ErrLeaseHeld):
				t.Fatalf("Grant(%q, %q): %v", r.Key, r.LeaseID, err)
			case time.Since(start) > time.Minute:
				t.Fatalf("Grant(%q, %q) for a minute: %v", r.Key, r.LeaseID, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	release := func(b backend.Backend, l backend.Lease) {
		t.Helper()
		start := time.Now()
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := b.Release(rctx, l.Key, l.LeaseID)
			cancel()
			if err == nil {
				return
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("Release(%q, %q) for a minute: %v", l.Key, l.LeaseID, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	highest := make(map[string]uint64) // each key's highest token so far
	var old []backend.Request
	round := func(b backend.Backend, n int) {
		t.Helper()
		for _, k := range keys {
			r := req(k, fmt.Sprintf("%s-%d", k, n), 10*time.Second)
			l := grant(b, r)
			if l.Token <= highest[k] {
				t.Fatalf("round %d: Grant(%q) = token %d, not above %d, the key's highest before its reclaim: a token reissued", n, k, l.Token, highest[k])
			}
			highest[k] = l.Token
			old = append(old, r)
			release(b, l)
		}
	}
	watch := etcdtest.NewClient(t, cl.Endpoints())
	gone := func(what string) {
		t.Helper()
		took := waitUntil(t, what, func() bool {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			n, err := userKeys(cctx, watch, prefix)
			return err == nil && n == 0
		})
		t.Logf("%s after %v", what, took.Round(time.Millisecond))
	}

	round(b, 1)
	arm.Store(true)
	gone("reclaimed through a killed leader")
	m := killed.Load()
	if m == nil {
		t.Fatal("no leader was killed during a deleting pass: the case tested nothing")
	}
	if err := m.Start(); err != nil {
		t.Fatalf("restart the killed member: %v", err)
	}
	round(b, 2)
	gone("reclaimed again")

	// Every member down, then up again; a new backend, as after a restart
	// of the process too.
	cl.Stop()
	var wg sync.WaitGroup
	for _, m := range cl.Members {
		wg.Go(func() {
			if err := m.Start(); err != nil {
				t.Errorf("start %s: %v", m.Name, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	b2 := open()
	round(b2, 3)
	for _, r := range old[:len(keys)] { // round 1's, resent after two reclaims
		l := grant(b2, r)
		if l.Token <= highest[r.Key] {
			t.Fatalf("Grant(%q, %q) resent after its key's reclaims: token %d, not above %d", r.Key, r.LeaseID, l.Token, highest[r.Key])
		}
		highest[r.Key] = l.Token
	}
}
