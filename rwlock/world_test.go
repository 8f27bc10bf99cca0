package rwlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faultbackend"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
	"github.com/fencing-go/fencing/rwlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type world = recipetest.World

var worlds = recipetest.Each

// newLock returns the lock named name on c.
func newLock(t *testing.T, c *fencing.Coordinator, name string, opts ...rwlock.Option) *rwlock.RWLock {
	t.Helper()
	l, err := rwlock.New(c, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// errDead is what a dead process's store calls return: they never left.
var errDead = errors.New("the process is dead (test)")

// dying is a process's backend that can die: from then on its renewals and
// releases never reach the store (as after kill -9, or a SIGSTOP longer than
// the leases), so its leases end only by expiry.
type dying struct {
	*faultbackend.Backend
	many backend.MultiGranter
	dead atomic.Bool
}

func newDying(b backend.Backend) *dying {
	pass := func(_ context.Context, _ faultbackend.Op, _ string, err error) error { return err }
	return &dying{Backend: faultbackend.New(b, pass), many: b.(backend.MultiGranter)}
}

func (d *dying) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	return d.many.GrantMany(ctx, reqs)
}

func (d *dying) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if d.dead.Load() {
		return backend.Lease{}, fmt.Errorf("renew: %w", errDead)
	}
	return d.Backend.Renew(ctx, req)
}

func (d *dying) Release(ctx context.Context, key, leaseID string) error {
	if d.dead.Load() {
		return fmt.Errorf("release: %w", errDead)
	}
	return d.Backend.Release(ctx, key, leaseID)
}

var recipeMemory = recipetest.Memory
