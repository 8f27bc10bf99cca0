package etcdbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/heldtest"
)

// TestHoldServerStopsAnswering: a holder whose etcd stops answering (every
// byte held by a proxy) sees its lease's context end by the Deadline of its
// last confirmed renewal, and not later, and the lease stays lost after etcd
// answers again.
func TestHoldServerStopsAnswering(t *testing.T) {
	m := etcdtest.Start(t)
	p := etcdtest.StartProxy(t, m.ClientURL)
	b, _ := newBackend(t, etcdtest.NewClient(t, p.Endpoints()))
	c := fencing.New(b)
	ctx := context.Background()
	const ttl = 2 * time.Second
	h, err := c.Hold(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	time.Sleep(ttl) // a renewal or two
	p.SetMode(etcdtest.Pause)
	paused := time.Now()
	// The context ends at the Deadline (a renewal answered just before the
	// pause may still move it), timed against a timer for it.
	heldtest.EndsAtDeadline(t, h, 3*ttl, 100*time.Millisecond)
	if deadline := h.Lease().Deadline; deadline.After(paused.Add(ttl)) {
		t.Fatalf("a renewal was confirmed with etcd paused: Deadline %v after the pause", deadline.Sub(paused))
	}
	if err := h.Err(); !errors.Is(err, fencing.ErrLeaseLost) {
		t.Fatalf("Err after the lease ran out = %v, want ErrLeaseLost", err)
	}
	p.SetMode(etcdtest.Forward)
	time.Sleep(ttl / 2)
	if h.Err() == nil || h.Context().Err() == nil {
		t.Fatal("the lease came back after etcd answered again")
	}
}

// TestHoldLeaderStopped: a held lease on a 3-member cluster whose leader is
// stopped mid-hold is kept through the election, or its loss is reported;
// it is never believed held while the coordinator says otherwise.
func TestHoldLeaderStopped(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3)
	prefix := newPrefix("hold-leader")
	b, err := newWithPrefix(etcdtest.NewClient(t, cl.Endpoints()), prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	checker := fencing.New(backendOn(t, etcdtest.NewClient(t, cl.Endpoints()), prefix))
	c := fencing.New(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 3 * time.Second
	h, err := c.Hold(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	began := time.Now()
	leader, err := cl.WaitLeader(ctx)
	elected := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl / 2)
	leader.Stop()
	ctx = afterElection(t, elected)
	if _, err := cl.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // renewals under the new leader
	if err := h.Err(); err != nil {
		t.Logf("the lease was lost in the election: %v", err)
		if ok, cerr := checker.CheckToken(ctx, "k", h.Token()); cerr != nil || ok {
			t.Fatalf("lost lease: CheckToken = %v, %v; want false", ok, cerr)
		}
		return
	}
	if ok, err := checker.CheckToken(ctx, "k", h.Token()); err != nil || !ok {
		t.Fatalf("held through the election, but CheckToken = %v, %v", ok, err)
	}
	if h.Lease().Deadline.Before(time.Now()) {
		t.Fatal("held, but its Deadline has passed")
	}
}
