// Package tokenctx holds the context key of a fencing token, so that the
// root package (Held.Context) and package guard (guard.ContextWithToken,
// guard.TokenFromContext, the carriers) share one key without either
// importing the other.
package tokenctx

import "context"

// key is the context key of the token; its one value is unexported.
type key struct{}

// value is what the context holds under key.
type value struct {
	resource string
	token    uint64
}

// With returns a child of ctx that carries token for resource, replacing
// any token ctx carried.
func With(ctx context.Context, resource string, token uint64) context.Context {
	return context.WithValue(ctx, key{}, value{resource, token})
}

// From returns the token ctx carries and the resource it is for; ok is
// false when ctx carries none.
func From(ctx context.Context) (resource string, token uint64, ok bool) {
	v, ok := ctx.Value(key{}).(value)
	return v.resource, v.token, ok
}

// IsKey reports whether k is the token's context key: a context that
// carries a token without a WithValue layer of its own answers Value(k)
// with Value(resource, token) when it is.
func IsKey(k any) bool {
	_, is := k.(key)
	return is
}

// Value is what a context that carries token for resource holds under the
// token's key.
func Value(resource string, token uint64) any { return value{resource, token} }
