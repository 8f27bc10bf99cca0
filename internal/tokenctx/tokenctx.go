// Package tokenctx holds the context key of fencing tokens, so that the
// root package (Held.Context, HeldMany.Context) and package guard
// (guard.ContextWithToken, guard.TokensFromContext, the carriers) share one
// key without either importing the other.
package tokenctx

import (
	"context"
	"sort"
)

// key is the context key of the tokens; its one value is unexported.
type key struct{}

// Token is one resource's token.
type Token struct {
	Resource string
	Token    uint64
}

// value is what the context holds under key: tokens sorted by resource,
// one per resource.
type value []Token

// With returns a child of ctx that carries token for resource, replacing
// any tokens ctx carried.
func With(ctx context.Context, resource string, token uint64) context.Context {
	return context.WithValue(ctx, key{}, value{{resource, token}})
}

// WithAll returns a child of ctx that carries tokens, replacing any ctx
// carried (see Value).
func WithAll(ctx context.Context, tokens []Token) context.Context {
	return context.WithValue(ctx, key{}, Value(tokens...))
}

// From returns the token ctx carries and the resource it is for; ok is
// false when ctx carries none or more than one.
func From(ctx context.Context) (resource string, token uint64, ok bool) {
	v, _ := ctx.Value(key{}).(value)
	if len(v) != 1 {
		return "", 0, false
	}
	return v[0].Resource, v[0].Token, true
}

// All returns the tokens ctx carries, sorted by resource, or nil.
func All(ctx context.Context) []Token {
	v, _ := ctx.Value(key{}).(value)
	return append([]Token(nil), v...)
}

// IsKey reports whether k is the tokens' context key: a context that
// carries tokens without a WithValue layer of its own answers Value(k)
// with Value(tokens...) when it is.
func IsKey(k any) bool {
	_, is := k.(key)
	return is
}

// Value is what a context that carries tokens holds under the tokens' key:
// a copy sorted by resource, where a resource given more than once keeps
// its last token.
func Value(tokens ...Token) any {
	v := make(value, len(tokens))
	copy(v, tokens)
	sort.SliceStable(v, func(i, j int) bool { return v[i].Resource < v[j].Resource })
	out := v[:0]
	for _, t := range v {
		if n := len(out); n > 0 && out[n-1].Resource == t.Resource {
			out[n-1] = t // stable: the later one wins
			continue
		}
		out = append(out, t)
	}
	return out
}
