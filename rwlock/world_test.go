package rwlock_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fencing-go/fencing"
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

var recipeMemory = recipetest.Memory
