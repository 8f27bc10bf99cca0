package kubebackend

import "context"

// Sweep runs one reclaiming pass of b now, as its goroutine does every
// retention/8: tests time passes with a fake clock.
func Sweep(ctx context.Context, b *Backend) error { return b.sweep(ctx) }
