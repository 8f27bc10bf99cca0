package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencing-go/fencing/internal/tokenctx"
)

// ErrNoToken is returned by AdmitContext, and by the carriers in
// guard/httpguard and guard/grpcguard when they require a token, for a
// context (or a request) that carries no fencing token.
var ErrNoToken = errors.New("no fencing token in the context")

// ContextWithToken returns a child of ctx that carries token as the fencing
// token for resource (usually the lease key), replacing any token ctx
// carried: one token per context. A held lease's context carries its own
// (fencing.Held.Context); the carriers in guard/httpguard and
// guard/grpcguard send the context's token to the service that writes and
// put it in that service's request context. This package is the one home
// of the token's context key: the fencing package carries the same key in
// Held.Context without importing this one.
//
// The token is not checked here: the carriers refuse token 0 and bad
// resource names before sending, and guards refuse them on Admit.
func ContextWithToken(ctx context.Context, resource string, token uint64) context.Context {
	return tokenctx.With(ctx, resource, token)
}

// TokenFromContext returns the fencing token ctx carries and the resource
// it is for; ok is false when ctx carries none, and a held lease's context
// (fencing.Held.Context) carries its key and token.
func TokenFromContext(ctx context.Context) (resource string, token uint64, ok bool) {
	return tokenctx.From(ctx)
}

// AdmitContext admits the token ctx carries through g, for the resource
// ctx names: g.Admit(ctx, resource, token). A context with no token gets an
// error wrapping ErrNoToken and g is not called.
//
// An Admit is a fence, not a write: admitting before a write to another
// store is not atomic with that write. A service that writes passes the
// context's token to its store guard's own write (see TokenFromContext).
func AdmitContext(ctx context.Context, g Guard) error {
	resource, token, ok := tokenctx.From(ctx)
	if !ok {
		return fmt.Errorf("admit: %w", ErrNoToken)
	}
	return g.Admit(ctx, resource, token)
}

// Writer is a guard that runs a caller's write as one step with admitting a
// token, under the resource's lock, as Memory.Write does. The carriers in
// guard/httpguard and guard/grpcguard run a handler under it, for resources
// that live in the handler's process.
type Writer interface {
	Guard
	// Write admits token for resource and calls write as one step: a
	// stale token gets an error wrapping ErrStaleToken and write is not
	// called; the fence rises only if write returns nil.
	Write(ctx context.Context, resource string, token uint64, write func() error) error
}

var _ Writer = (*Memory)(nil)
