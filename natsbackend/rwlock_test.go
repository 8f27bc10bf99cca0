package natsbackend_test

import (
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/rwtest"
	"github.com/fencing-go/fencing/natsbackend/natstest"
)

// rwTTL and rwMargin are the rwlock tests' leases: the shortest ttl and
// the margin the conformance harness holds to on this loaded machine.
const rwTTL, rwMargin = time.Second, 500 * time.Millisecond

// rwLimit bounds a waiter's wait behind a dead holder. Observed expiry
// took 1.52 s (ttl 1 s + margin 0.5 s, plus 20 ms) at load
// 15-20 under -race; twice ttl + margin leaves room for a loaded
// machine's round trips.
const rwLimit = 2 * (rwTTL + rwMargin)

// rwProcesses returns n processes' backends on one fresh bucket, each on a
// connection of its own, closed when t ends.
func rwProcesses(t *testing.T, n int) []backend.Backend {
	srv := natstest.Shared(t)
	_, js := srv.Connect(t)
	bucket := natstest.Bucket(t, js)
	var bs []backend.Backend
	for range n {
		_, js := srv.Connect(t)
		b, err := open(js, bucket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	return bs
}

// TestRWLockReaders: package rwlock on a KV bucket, which grant no several
// keys at once and keep no line of waiters: readers work, a writer's Lock
// fails with errors.ErrUnsupported (rwtest.ReadersOnly).
func TestRWLockReaders(t *testing.T) {
	rwtest.ReadersOnly(t, rwProcesses(t, 3), rwTTL, rwMargin, rwLimit)
}

// TestRWLockExpiredReader: a dead reader holds up the next one only until
// its entries are seen unchanged for their ttl + margin (observed expiry, see
// the package documentation; rwtest.ExpiredReader).
func TestRWLockExpiredReader(t *testing.T) {
	rwtest.ExpiredReader(t, rwProcesses(t, 2), rwTTL, rwMargin, rwLimit)
}
