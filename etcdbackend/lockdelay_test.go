package etcdbackend_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// The lock delay's behaviour is the conformance suite's (LockDelay*); these
// tests check what is etcd's own: the delay record that outlives the lease
// key, the wake-up at the delay's end, and a delay across a restart.

// record returns key's etcd record name ("l", "d", ...) under prefix, or nil
// when it does not exist.
func record(t testing.TB, cli *clientv3.Client, prefix, key, name string) *clientv3.GetResponse {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix+base64.RawURLEncoding.EncodeToString([]byte(key))+"/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp
}

// wantHeldDelayed fails unless a newcomer's grant on key is refused as in a
// lock delay with at most most left.
func wantHeldDelayed(t testing.TB, b backend.Backend, key, id string, most time.Duration) {
	t.Helper()
	_, err := b.Grant(context.Background(), req(key, id, time.Minute))
	var held *backend.HeldError
	if !errors.As(err, &held) || !held.Delayed || held.Remaining <= 0 || held.Remaining > most {
		t.Fatalf("Grant(%q) during a lock delay: %v, want a *backend.HeldError, Delayed, with (0, %v] left", key, err, most)
	}
}

// TestLockDelayOutlivesLeaseKey: after the expiry deletes the lease key, the
// delay record on its own etcd lease keeps the key closed, and its deletion
// by etcd at the delay's end wakes a waiter of NotifyFree, whose grant then
// succeeds.
func TestLockDelayOutlivesLeaseKey(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	const delay = 3 * time.Second
	r := backend.Request{Key: "k", LeaseID: "A", Timeout: time.Second, LockDelay: delay}
	lease := mustGrant(t, b, r)
	if record(t, cli, prefix, "k", "d") == nil {
		t.Fatal("no delay record beside a live lease with a lock delay")
	}
	s := subscribe(t, b, "k")
	waitFree(t, b, "k")
	if record(t, cli, prefix, "k", "l") != nil {
		t.Fatal("lease key still there after Token reported no live lease")
	}
	if record(t, cli, prefix, "k", "d") == nil {
		t.Fatal("the delay record went with the lease key: the delay did not outlive it")
	}
	wantHeldDelayed(t, b, "k", "B", delay+time.Second)
	drain(s)
	before := etcdbackend.Deletions(s)
	wantDeletion(t, s, before, delay+5*time.Second, "the delay's end")
	if record(t, cli, prefix, "k", "d") != nil {
		t.Fatal("woken while the delay record still exists")
	}
	next := mustGrant(t, b, req("k", "C", time.Minute))
	if next.Token <= lease.Token {
		t.Fatalf("token after the delay %d, want above %d", next.Token, lease.Token)
	}
}

// TestLockDelayReleaseLeavesNoRecord: a release by the holder deletes the
// delay record in its Txn and pools its etcd lease with the lease key's, so
// that the next grant with the same terms needs no LeaseGrant.
func TestLockDelayReleaseLeavesNoRecord(t *testing.T) {
	cli := etcdtest.Client(t)
	b, prefix := newBackend(t, cli)
	r := backend.Request{Key: "k", LeaseID: "A", Timeout: 5 * time.Second, LockDelay: 2 * time.Second}
	mustGrant(t, b, r)
	dl := record(t, cli, prefix, "k", "d").Kvs[0].Lease
	if err := b.Release(context.Background(), "k", "A"); err != nil {
		t.Fatal(err)
	}
	if record(t, cli, prefix, "k", "d") != nil {
		t.Fatal("delay record left after a release by the holder")
	}
	r2 := r
	r2.Key, r2.LeaseID = "k2", "B"
	mustGrant(t, b, r2)
	if got := record(t, cli, prefix, "k2", "d").Kvs[0].Lease; got != dl {
		t.Errorf("the next grant's delay record is on etcd lease %x, want the pooled %x", got, dl)
	}
}

// TestLockDelayAcrossRestart: a delay begun by a forced release holds across
// a restart of the server (etcd keeps leases on disk, and the new leader
// gives each its full TTL again, so the delay is still on right after the
// restart, and may last up to that much longer), and ends.
func TestLockDelayAcrossRestart(t *testing.T) {
	m := etcdtest.Start(t, etcdtest.WithFsync())
	cli := etcdtest.NewClient(t, m.Endpoints())
	b, _ := newBackend(t, cli)
	const delay = 2 * time.Second
	mustGrant(t, b, backend.Request{Key: "k", LeaseID: "A", Timeout: time.Minute, LockDelay: delay})
	if ended, err := b.ForceRelease(context.Background(), "k"); err != nil || !ended {
		t.Fatalf("ForceRelease = %v, %v", ended, err)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	wantHeldDelayed(t, b, "k", "B", delay+time.Second)
	deadline := restarted.Add(delay + 5*time.Second)
	for {
		_, err := b.Grant(context.Background(), req("k", "C", time.Minute))
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrLeaseHeld) || time.Now().After(deadline) {
			t.Fatalf("Grant %v after the restart: %v", time.Since(restarted), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLockDelayLeaderStopped: a delay begun by a forced release holds after
// the leader is stopped and another elected (the new leader gives every
// etcd lease its full TTL again, so the delay may last that much longer),
// and ends.
func TestLockDelayLeaderStopped(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	leader, err := cl.WaitLeader(ctx)
	elected := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	var on *etcdtest.Member
	for _, m := range cl.Members {
		if m != leader {
			on = m
		}
	}
	b, _ := newBackend(t, etcdtest.NewClient(t, on.Endpoints()))
	const delay = 2 * time.Second
	mustGrant(t, b, backend.Request{Key: "k", LeaseID: "A", Timeout: time.Minute, LockDelay: delay})
	if ended, err := b.ForceRelease(ctx, "k"); err != nil || !ended {
		t.Fatalf("ForceRelease = %v, %v", ended, err)
	}
	leader.Stop()
	ctx = afterElection(t, elected)
	if _, err := cl.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	reelected := time.Now()
	for {
		_, err := b.Grant(ctx, req("k", "B", time.Minute))
		var held *backend.HeldError
		if errors.As(err, &held) && held.Delayed {
			break // the delay is on under the new leader
		}
		if err == nil || !errors.Is(err, backend.ErrOutcomeUnknown) && !errors.Is(err, backend.ErrLeaseHeld) {
			t.Fatalf("Grant during the delay, under the new leader: %v, want a refusal as delayed", err)
		}
		time.Sleep(50 * time.Millisecond) // no answer yet
	}
	for {
		_, err := b.Grant(ctx, req("k", "C", time.Minute))
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrLeaseHeld) || time.Since(reelected) > delay+5*time.Second {
			t.Fatalf("Grant %v after the new leader: %v", time.Since(reelected), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRenewChangesTTLMovesDelay: a renewal to other seconds moves the delay
// record with the lease key, to an etcd lease that outlives the new one by
// the delay, and leaves no old etcd lease behind.
func TestRenewChangesTTLMovesDelay(t *testing.T) {
	cli := etcdtest.NewClient(t, etcdtest.Start(t).Endpoints()) // counts leases: a server of its own
	b, prefix := newBackend(t, cli)
	ctx := context.Background()
	base := leaseCount(t, cli)
	const delay = 1500 * time.Millisecond // 2 whole seconds
	r := backend.Request{Key: "k", LeaseID: "A", Timeout: 2 * time.Second, Margin: time.Second, LockDelay: delay}
	mustGrant(t, b, r)
	for _, timeout := range []time.Duration{time.Minute, 2 * time.Second, 10 * time.Second} {
		r.Timeout = timeout
		l, err := b.Renew(ctx, r)
		if err != nil {
			t.Fatalf("Renew(%v): %v", timeout, err)
		}
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(record(t, cli, prefix, "k", "d").Kvs[0].Lease))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := time.Duration(ttl.GrantedTTL)*time.Second, l.TTL+l.Margin+2*time.Second; got != want {
			t.Fatalf("after Renew(%v) the delay record's etcd lease is of %v, want the lease's %v + 2s", timeout, got, l.TTL+l.Margin)
		}
		if n := leaseCount(t, cli) - base; n != 2 {
			t.Fatalf("%d etcd leases after a renewal, want 2 (the lease key's, the delay record's)", n)
		}
	}
}

// TestLateReletKeepsDelay: a renewal to other seconds just after the TTL
// ran out (before or after etcd's revoke deleted the lease key) gets
// ErrLeaseExpired, and the delay runs from the expiry, not from the
// renewal's new seconds (its undo puts the delay record back on its old
// etcd lease).
func TestLateReletKeepsDelay(t *testing.T) {
	cli := etcdtest.Client(t)
	b, _ := newBackend(t, cli)
	ctx := context.Background()
	const delay = 2 * time.Second
	for i := range 3 {
		key := fmt.Sprint("window", i)
		r := backend.Request{Key: key, LeaseID: "L", Timeout: 500 * time.Millisecond, Margin: 500 * time.Millisecond, LockDelay: delay}
		l := mustGrant(t, b, r)
		time.Sleep(time.Until(l.ExpiresAt) + time.Duration(i)*150*time.Millisecond + 100*time.Millisecond)
		r.Timeout = time.Minute
		if _, err := b.Renew(ctx, r); !errors.Is(err, backend.ErrLeaseExpired) {
			t.Fatalf("renewal %d to other seconds after TTL: %v, want ErrLeaseExpired", i, err)
		}
		wantHeldDelayed(t, b, key, "B", delay+time.Second)
		deadline := l.ExpiresAt.Add(delay + 3*time.Second)
		for {
			_, err := b.Grant(ctx, req(key, "C", time.Minute))
			if err == nil {
				break
			}
			if !errors.Is(err, backend.ErrLeaseHeld) || time.Now().After(deadline) {
				t.Fatalf("Grant %v after the lease's expiry: %v", time.Since(l.ExpiresAt), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
