package guard_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard"
)

// memoryStore is the guard suite's view of a Memory guarding a map.
type memoryStore struct {
	*guard.Memory
	mu     sync.Mutex
	values map[string]string
}

var errWriteFailed = errors.New("the write failed")

func (s *memoryStore) Write(ctx context.Context, resource string, token uint64, value string) error {
	return s.Memory.Write(ctx, resource, token, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.values[resource] = value
		return nil
	})
}

func (s *memoryStore) FailedWrite(ctx context.Context, resource string, token uint64, value string) error {
	return s.Memory.Write(ctx, resource, token, func() error { return errWriteFailed })
}

func (s *memoryStore) Drop(ctx context.Context, resource string, token uint64) error {
	return s.Memory.Drop(ctx, resource, token, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.values, resource)
		return nil
	})
}

func (s *memoryStore) FailedDrop(ctx context.Context, resource string, token uint64) error {
	return s.Memory.Drop(ctx, resource, token, func() error { return errWriteFailed })
}

func (s *memoryStore) Read(ctx context.Context, resource string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[resource], nil
}

type memoryHarness struct{}

func (memoryHarness) NewGuardStore(context.Context, testing.TB) (conformance.GuardStore, error) {
	return &memoryStore{Memory: guard.NewMemory(), values: make(map[string]string)}, nil
}

func TestMemoryConformance(t *testing.T) { conformance.RunGuard(t, memoryHarness{}) }

func TestMemoryFence(t *testing.T) {
	m := guard.NewMemory()
	if got := m.Fence("r"); got != 0 {
		t.Fatalf("Fence of a new resource = %d, want 0", got)
	}
	ctx := context.Background()
	if err := m.Admit(ctx, "r", 7); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(ctx, "r", 9, func() error { return errWriteFailed }); !errors.Is(err, errWriteFailed) {
		t.Fatalf("failed write: got %v, want the write's own error", err)
	}
	if got := m.Fence("r"); got != 7 {
		t.Fatalf("Fence = %d, want 7", got)
	}
}

// Writes and Drops of one resource never run their functions at once: a
// Write that waited for the lock of a fence that a Drop took out looks
// again. Found with the re-check taken out of the lock: "2 functions ran at
// once on one resource".
func TestMemoryDropKeepsWritesApart(t *testing.T) {
	m := guard.NewMemory()
	ctx := context.Background()
	var inside atomic.Int32
	step := func() error {
		if n := inside.Add(1); n != 1 {
			t.Errorf("%d functions ran at once on one resource", n)
		}
		runtime.Gosched()
		inside.Add(-1)
		return nil
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				var err error
				if (w+i)%3 == 0 {
					err = m.Drop(ctx, "r", 1, step)
				} else {
					err = m.Write(ctx, "r", 1, step)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
