package guard_test

import (
	"context"
	"testing"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/testing/minttest"
)

// mintMemory is a Memory as minttest sees it.
type mintMemory struct{ *guard.Memory }

func (m mintMemory) Fence(_ context.Context, resource string) (uint64, error) {
	return m.Memory.Fence(resource), nil
}

func TestMemoryMintCheck(t *testing.T) {
	minttest.Run(t, func(t *testing.T, mc *guard.MintCheck) minttest.Store {
		return mintMemory{guard.NewMemory(guard.WithMintCheck(mc))}
	})
}
