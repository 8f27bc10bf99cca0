package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/tokenctx"
)

// MaxTokensPerRequest is the most fencing tokens one request may carry to
// the receiving end of a carrier (guard/httpguard's Middleware, the
// guard/grpcguard server interceptors): as many as one fencing.HeldMany
// holds (backend.MaxKeys). A request with more values is refused as
// malformed (400 Bad Request, codes.InvalidArgument) before any is parsed,
// mint-checked or written, since each could cost a read of the lock store
// and a nested write.
const MaxTokensPerRequest = backend.MaxKeys

// ErrNoToken is returned by AdmitContext, and by the carriers in
// guard/httpguard and guard/grpcguard when they require a token, for a
// context (or a request) that carries no fencing token.
var ErrNoToken = errors.New("no fencing token in the context")

// Token is one resource's fencing token, as a context carries it (see
// TokensFromContext).
type Token struct {
	Resource string // usually the lease key
	Value    uint64 // the token
}

// ContextWithToken returns a child of ctx that carries token as the fencing
// token for resource (usually the lease key), replacing any tokens ctx
// carried. A held lease's context carries its own
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

// ContextWithTokens returns a child of ctx that carries tokens, one per
// resource, replacing any tokens ctx carried; a resource given more than
// once keeps its last token. A fencing.HeldMany's context carries one per
// key the same way. The carriers send them all, and the service writes
// each resource under its own token. As with ContextWithToken, the tokens
// are not checked here.
func ContextWithTokens(ctx context.Context, tokens ...Token) context.Context {
	ts := make([]tokenctx.Token, len(tokens))
	for i, t := range tokens {
		ts[i] = tokenctx.Token{Resource: t.Resource, Token: t.Value}
	}
	return tokenctx.WithAll(ctx, ts)
}

// TokenFromContext returns the fencing token ctx carries and the resource
// it is for, when it carries exactly one: a held lease's context
// (fencing.Held.Context) carries its key and token. ok is false when ctx
// carries none, and also when it carries several (a fencing.HeldMany's
// context, ContextWithTokens): code written for one token never takes one
// of several for all of them. TokensFromContext returns them all.
func TokenFromContext(ctx context.Context) (resource string, token uint64, ok bool) {
	return tokenctx.From(ctx)
}

// TokensFromContext returns every fencing token ctx carries, one per
// resource, sorted by resource, or nil when it carries none. A held
// lease's context carries one; a fencing.HeldMany's carries each key's.
func TokensFromContext(ctx context.Context) []Token {
	ts := tokenctx.All(ctx)
	if len(ts) == 0 {
		return nil
	}
	tokens := make([]Token, len(ts))
	for i, t := range ts {
		tokens[i] = Token{Resource: t.Resource, Value: t.Token}
	}
	return tokens
}

// AdmitContext admits the token ctx carries through g, for the resource
// ctx names: g.Admit(ctx, resource, token). A context carrying several
// (TokensFromContext) has each admitted, in resource order, up to the
// first refusal, which it returns. A context with no token gets an error
// wrapping ErrNoToken and g is not called.
//
// An Admit is a fence, not a write: admitting before a write to another
// store is not atomic with that write. A service that writes passes the
// context's token to its store guard's own write (see TokenFromContext).
func AdmitContext(ctx context.Context, g Guard) error {
	tokens := tokenctx.All(ctx)
	if len(tokens) == 0 {
		return fmt.Errorf("admit: %w", ErrNoToken)
	}
	for _, t := range tokens {
		if err := g.Admit(ctx, t.Resource, t.Token); err != nil {
			return err
		}
	}
	return nil
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
