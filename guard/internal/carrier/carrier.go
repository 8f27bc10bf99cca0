// Package carrier is the one home of the receiving end's options that the
// two token carriers share: guard/httpguard's Middleware and
// guard/grpcguard's server interceptors. Each carrier's RequireToken,
// WithWriter, WithMintCheck and WithPropagator set the field here of the
// same name, so the two take a token alike; each carrier keeps its own
// option types (an unexported method of its own package) and its own docs.
package carrier

import (
	"go.opentelemetry.io/otel/propagation"

	"github.com/fencing-go/fencing/guard"
)

// Config is what the receiving end's options set.
type Config struct {
	// Writer runs the handler under the request's token (WithWriter); nil:
	// the handler runs as it is.
	Writer guard.Writer
	// Require refuses a request without a token (RequireToken, and
	// WithWriter, which implies it).
	Require bool
	// Mint refuses a token never minted (WithMintCheck); a nil
	// *guard.MintCheck admits every token.
	Mint *guard.MintCheck
	// Propagator reads the caller's trace context (WithPropagator); nil:
	// none is read.
	Propagator propagation.TextMapPropagator
}

// RequireToken is what the carriers' RequireToken does.
func RequireToken(c *Config) { c.Require = true }

// WithWriter returns what the carriers' WithWriter does: run the handler
// under w, which implies RequireToken.
func WithWriter(w guard.Writer) func(*Config) {
	return func(c *Config) { c.Writer, c.Require = w, true }
}

// WithMintCheck returns what the carriers' WithMintCheck does.
func WithMintCheck(mc *guard.MintCheck) func(*Config) {
	return func(c *Config) { c.Mint = mc }
}
