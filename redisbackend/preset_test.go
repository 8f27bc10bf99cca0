package redisbackend_test

import (
	"context"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// PresetToken implements conformance.TokenPresetter.
func (h *harness) PresetToken(ctx context.Context, b backend.Backend, key string, token uint64) error {
	return redistest.PresetToken(ctx, h.client, b, key, token)
}
