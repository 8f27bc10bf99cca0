// Package tokenctx holds the context key of a fencing token, so that the
// root package (Held.Context, fencing.ContextWithToken) and package guard
// (guard.ContextWithToken, the carriers) share one key without guard
// importing the root package.
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

// Lookup answers a context's Value(k) for a context that carries token
// for resource without a WithValue layer of its own: v is the value and
// ok is true when k is the token's key.
func Lookup(k any, resource string, token uint64) (v any, ok bool) {
	if _, is := k.(key); !is {
		return nil, false
	}
	return value{resource, token}, true
}
