package guard_test

import (
	"context"
	"errors"
	"sync"
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
