package etcdbackend

import (
	"errors"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestRevisionFloor: an answer may be below the highest revision seen when
// its request was concurrent with the one that saw it, but never below the
// highest seen before its request was sent.
func TestRevisionFloor(t *testing.T) {
	k := revisionKV{highest: new(atomic.Int64)}
	at := func(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }
	floor := k.highest.Load() // two requests sent now
	if err := k.observe(floor, at(10)); err != nil {
		t.Fatal(err)
	}
	if err := k.observe(floor, at(9)); err != nil { // the concurrent one, answered earlier, read later
		t.Fatalf("a concurrent answer below the highest: %v", err)
	}
	if got := k.highest.Load(); got != 10 {
		t.Fatalf("highest = %d, want 10", got)
	}
	if err := k.observe(k.highest.Load(), at(9)); !errors.Is(err, ErrRevisionRegressed) {
		t.Fatalf("an answer below the revision seen before it was sent: %v, want ErrRevisionRegressed", err)
	}
}
