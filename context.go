package fencing

import (
	"context"

	"github.com/fencing-go/fencing/internal/tokenctx"
)

// ContextWithToken returns a child of ctx that carries token as the fencing
// token for resource (usually the lease key), replacing any token ctx
// carried. A Held's Context carries its lease's key and token already. The
// carriers in guard/httpguard and guard/grpcguard send the context's token
// to the service that writes, where a guard admits it with the write (see
// guard.ContextWithToken, the same function, and docs/across-services.md).
func ContextWithToken(ctx context.Context, resource string, token uint64) context.Context {
	return tokenctx.With(ctx, resource, token)
}

// TokenFromContext returns the fencing token ctx carries and the resource
// it is for; ok is false when ctx carries none (guard.TokenFromContext is
// the same function).
func TokenFromContext(ctx context.Context) (resource string, token uint64, ok bool) {
	return tokenctx.From(ctx)
}
