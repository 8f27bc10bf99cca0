package kubebackend_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/rwtest"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// rwTTL and rwMargin are the rwlock tests' leases: the shortest ttl
// (leaseDurationSeconds is whole seconds) and margin the conformance
// harness holds to on this loaded machine.
const rwTTL, rwMargin = 2 * time.Second, 500 * time.Millisecond

// rwLimit bounds a waiter's wait behind a dead holder. Observed expiry
// took 2.54 s (ttl 2 s + margin 0.5 s, plus 40 ms) at load
// 15-20 under -race; twice ttl + margin leaves room for a loaded
// machine's round trips.
const rwLimit = 2 * (rwTTL + rwMargin)

// rwProcesses returns n processes' backends on one fresh namespace, each on
// a client of its own, closed when t ends.
func rwProcesses(t *testing.T, n int) []backend.Backend {
	srv := kubetest.Shared(t)
	ns, _ := srv.Namespace(t)
	var bs []backend.Backend
	for range n {
		client, err := kubernetes.NewForConfig(srv.API.Config(true))
		if err != nil {
			t.Fatal(err)
		}
		b, err := kubebackend.New(context.Background(), client, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	return bs
}

// TestRWLockReaders: package rwlock on Leases, which grant no several
// keys at once and keep no line of waiters: readers work, a writer's Lock
// fails with errors.ErrUnsupported (rwtest.ReadersOnly).
func TestRWLockReaders(t *testing.T) {
	rwtest.ReadersOnly(t, rwProcesses(t, 3), rwTTL, rwMargin, rwLimit)
}

// TestRWLockExpiredReader: a dead reader holds up the next one only until
// its Leases are seen unchanged for their ttl + margin (observed expiry, see
// the package documentation; rwtest.ExpiredReader).
func TestRWLockExpiredReader(t *testing.T) {
	rwtest.ExpiredReader(t, rwProcesses(t, 2), rwTTL, rwMargin, rwLimit)
}
