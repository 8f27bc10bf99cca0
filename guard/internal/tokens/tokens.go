// Package tokens is the server side of a request carrying several fencing
// tokens, shared by guard/httpguard and guard/grpcguard: one home for
// which sets of values are accepted and for the order in which a
// guard.Writer takes their resources.
package tokens

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/fencing-go/fencing/guard"
)

// ErrConflict is returned by Parse for two values naming one resource with
// different tokens.
var ErrConflict = errors.New("one resource with two different tokens")

// ErrTooMany is returned by Parse for more than guard.MaxTokensPerRequest
// values.
var ErrTooMany = errors.New("too many fencing tokens")

// Parse parses each of vs with parse (a carrier's own parser, which checks
// the token and the resource name and returns the carrier's error) and
// returns the tokens sorted by resource, one per resource: a value sent
// again with the same token is kept once, and one resource with two
// different tokens is an error wrapping ErrConflict. More than
// guard.MaxTokensPerRequest values are an error wrapping ErrTooMany, and
// none is parsed.
func Parse(vs []string, parse func(string) (string, uint64, error)) ([]guard.Token, error) {
	if len(vs) > guard.MaxTokensPerRequest {
		return nil, fmt.Errorf("%w: more than %d in one request: at most %d, one per resource", ErrTooMany, guard.MaxTokensPerRequest, guard.MaxTokensPerRequest)
	}
	tokens := make([]guard.Token, 0, len(vs))
	for _, v := range vs {
		resource, token, err := parse(v)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, guard.Token{Resource: resource, Value: token})
	}
	sort.Slice(tokens, func(i, j int) bool {
		if tokens[i].Resource != tokens[j].Resource {
			return tokens[i].Resource < tokens[j].Resource
		}
		return tokens[i].Value < tokens[j].Value
	})
	out := tokens[:0]
	for _, t := range tokens {
		if n := len(out); n > 0 && out[n-1].Resource == t.Resource {
			if out[n-1].Value != t.Value {
				return nil, fmt.Errorf("%w: %d and %d for resource %q", ErrConflict, out[n-1].Value, t.Value, t.Resource)
			}
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// Context returns a child of ctx that carries tokens: with
// guard.ContextWithToken for one, so a single-token request's context is
// what it always was, and guard.ContextWithTokens for several.
func Context(ctx context.Context, tokens []guard.Token) context.Context {
	if len(tokens) == 1 {
		return guard.ContextWithToken(ctx, tokens[0].Resource, tokens[0].Value)
	}
	return guard.ContextWithTokens(ctx, tokens...)
}

// Write runs write under w with every token admitted, as one step: the
// w.Write calls nest in the order of tokens (Parse's, by resource), so two
// requests whose resources overlap take their locks in the same order and
// cannot deadlock. A refused token refuses them all: write is not called
// and no fence rises; the fences rise only if write returns nil.
func Write(ctx context.Context, w guard.Writer, tokens []guard.Token, write func() error) error {
	if len(tokens) == 0 {
		return write()
	}
	t := tokens[0]
	return w.Write(ctx, t.Resource, t.Value, func() error { return Write(ctx, w, tokens[1:], write) })
}
