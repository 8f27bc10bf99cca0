package httpguard

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/internal/carrier"
	"github.com/fencing-go/fencing/guard/internal/header"
	"github.com/fencing-go/fencing/guard/internal/tokens"
)

// Header names.
const (
	// TokenHeader carries the caller's fencing token and its resource:
	// `Fencing-Token: 42; resource="orders%2F42"` (see the package doc).
	TokenHeader = "Fencing-Token"
	// FenceHeader, on a 409 Conflict, carries the fence that refused the
	// request's token, in the same syntax: `Fencing-Fence: 57;
	// resource="orders%2F42"`. A fence of 0 means the service did not
	// learn it.
	FenceHeader = "Fencing-Fence"
)

// ErrMalformedHeader is returned by Parse for a Fencing-Token value that is
// not in the syntax, or names token 0 or a bad resource; the middleware
// answers such a request with 400 Bad Request.
var ErrMalformedHeader = errors.New("httpguard: malformed " + TokenHeader + " header")

// Format returns the Fencing-Token value for token and resource.
func Format(resource string, token uint64) string { return header.Format(resource, token) }

// Parse returns the resource and token of a Fencing-Token value, or an
// error wrapping ErrMalformedHeader (and, for token 0 or a bad resource
// name, guard.ErrInvalidToken or backend.ErrInvalidKey).
func Parse(v string) (resource string, token uint64, err error) {
	resource, token, err = header.Parse(v)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s", ErrMalformedHeader, header.Detail(err))
	}
	if err := guard.CheckAdmit(resource, token); err != nil {
		return "", 0, fmt.Errorf("%w: %w", ErrMalformedHeader, err)
	}
	return resource, token, nil
}

// Transport returns a RoundTripper that sends each request's context
// tokens (guard.TokensFromContext: fencing.Held.Context carries one,
// fencing.HeldMany.Context one per key) through base
// (http.DefaultTransport when nil), one Fencing-Token header per token, in
// resource order. A request whose context carries no token goes out
// without the header; one with a token 0 or a resource that is not a
// valid name is not sent, and its error wraps guard.ErrInvalidToken or
// backend.ErrInvalidKey. Fencing-Token headers the caller set are
// replaced. With WithPropagator, every request also
// carries its context's trace context (a fencing.Held's context carries
// the held lease's span).
//
// Transport does not interpret responses (an http.RoundTripper must not):
// CheckResponse turns a 409 from a guard into a *guard.StaleTokenError.
func Transport(base http.RoundTripper, opts ...TransportOption) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &transport{base: base}
	for _, o := range opts {
		o.transport(t)
	}
	return t
}

type transport struct {
	base       http.RoundTripper
	propagator propagation.TextMapPropagator // nil: none
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	toks := guard.TokensFromContext(req.Context())
	if len(toks) == 0 && t.propagator == nil {
		return t.base.RoundTrip(req)
	}
	for _, tok := range toks {
		if err := guard.CheckAdmit(tok.Resource, tok.Value); err != nil {
			if req.Body != nil {
				req.Body.Close() // a RoundTripper closes the body, even on errors
			}
			return nil, fmt.Errorf("httpguard: not sending the context's token: %w", err)
		}
	}
	r := req.Clone(req.Context()) // a RoundTripper must not modify the request
	if len(toks) > 0 {
		r.Header.Del(TokenHeader)
	}
	for _, tok := range toks {
		r.Header.Add(TokenHeader, Format(tok.Resource, tok.Value))
	}
	if t.propagator != nil {
		t.propagator.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	}
	return t.base.RoundTrip(r)
}

// CheckResponse returns a *guard.StaleTokenError (which wraps
// guard.ErrStaleToken) when resp is a 409 Conflict with a Fencing-Fence
// header, as WriteStale and the middleware answer a stale token, and nil
// for any other response. The error's Token is the one the request's
// context carried for the fence's resource, or 0. It reads only the status
// and headers.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusConflict {
		return nil
	}
	v := resp.Header.Get(FenceHeader)
	if v == "" {
		return nil
	}
	resource, fence, err := header.Parse(v)
	if err != nil {
		return fmt.Errorf("httpguard: 409 with a malformed %s header: %w", FenceHeader, err)
	}
	e := &guard.StaleTokenError{Resource: resource, Fence: fence}
	if resp.Request != nil {
		for _, t := range guard.TokensFromContext(resp.Request.Context()) {
			if t.Resource == resource {
				e.Token = t.Value
			}
		}
	}
	return e
}

// WriteStale answers a request refused for a stale token: when
// errors.Is(err, guard.ErrStaleToken) it writes 409 Conflict with a
// Fencing-Fence header (the fence, from a *guard.StaleTokenError; 0 when
// err does not say it) and err's message as a text/plain body, and
// returns true. For any other err it writes nothing and returns false.
//
// A handler that writes through a store guard calls it with the guard's
// error; resource names the resource for the header when err is not a
// *guard.StaleTokenError.
func WriteStale(w http.ResponseWriter, resource string, err error) bool {
	if !errors.Is(err, guard.ErrStaleToken) {
		return false
	}
	var fence uint64
	var stale *guard.StaleTokenError
	if errors.As(err, &stale) {
		resource, fence = stale.Resource, stale.Fence
	}
	w.Header().Set(FenceHeader, Format(resource, fence))
	http.Error(w, err.Error(), http.StatusConflict)
	return true
}

// Option configures Middleware.
type Option interface{ middleware(*carrier.Config) }

// TransportOption configures Transport. Every TransportOption is an Option
// too: it configures both ends of the carrier alike.
type TransportOption interface {
	Option
	transport(*transport)
}

// option is an Option of Middleware alone.
type option func(*carrier.Config)

func (o option) middleware(c *carrier.Config) { o(c) }

// WithPropagator makes Transport send each request's trace context in
// the request's headers, written by p (propagation.TraceContext{} for the
// W3C traceparent and tracestate headers, or a composite with baggage),
// and Middleware read it back with p into the handler's context, where the
// handler's spans find their remote parent: a trace then goes from the
// holder's lease (fencing.SpanHeld) to the service's write. Without it, or
// with a nil p, neither end reads or writes trace headers.
func WithPropagator(p propagation.TextMapPropagator) TransportOption {
	return propagatorOption{p}
}

type propagatorOption struct{ p propagation.TextMapPropagator }

func (o propagatorOption) middleware(c *carrier.Config) { c.Propagator = o.p }
func (o propagatorOption) transport(t *transport)       { t.propagator = o.p }

// RequireToken makes Middleware answer a request without a Fencing-Token
// header with 428 Precondition Required (the handler is not called).
func RequireToken() Option { return option(carrier.RequireToken) }

// WithWriter makes Middleware run the handler under w (a *guard.Memory):
// the request's token is admitted for its resource and the handler runs
// as one step, under the resource's lock, so no write with a lower token
// runs at the same time or after it. A request with several tokens has
// them all admitted as one step with the handler: w's writes nest in
// resource order (so two such requests cannot deadlock), and the handler
// runs under every resource's lock. A stale token (any one of several) is
// answered with 409 Conflict naming its fence (see WriteStale), the
// handler is not called and no fence rises. It implies RequireToken. The fence rises when the handler
// returns, whatever it answered, and not if it panics.
//
// This is for a resource that lives in the handler's own process (a map,
// a file it alone writes). It does not make a database write atomic with
// the check: see the package doc.
func WithWriter(w guard.Writer) Option {
	return option(carrier.WithWriter(w))
}

// WithMintCheck makes Middleware refuse a token the lock store never
// minted (see guard.MintCheck) before next is called: 403 Forbidden when
// it is above the key's highest minted token (guard.ErrNotMinted), 503
// Service Unavailable when the lock store could not be read
// (guard.ErrMintUnchecked). A token already seen minted costs no read, so
// a holder pays one read of the lock store for its first request to this
// process. It is the default to use for a service that accepts tokens from
// the network; it does not authenticate the caller (see
// docs/across-services.md).
func WithMintCheck(mc *guard.MintCheck) Option { return option(carrier.WithMintCheck(mc)) }

// WriteRefused answers a request refused by a guard: a stale token as
// WriteStale does (409), a token never minted with 403 Forbidden, one that
// could not be checked with 503 Service Unavailable, each with err's
// message as a text/plain body, and returns true. For any other err it
// writes nothing and returns false.
func WriteRefused(w http.ResponseWriter, resource string, err error) bool {
	switch {
	case WriteStale(w, resource, err):
	case errors.Is(err, guard.ErrNotMinted):
		http.Error(w, oneLine(err), http.StatusForbidden)
	case errors.Is(err, guard.ErrMintUnchecked):
		http.Error(w, oneLine(err), http.StatusServiceUnavailable)
	default:
		return false
	}
	return true
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// Middleware parses the Fencing-Token headers of each request into the
// request's context (guard.TokenFromContext for one,
// guard.TokensFromContext for several) and calls next. A request may carry
// one value per resource, up to guard.MaxTokensPerRequest (as Transport
// sends a fencing.HeldMany's tokens, one header line each), on lines of
// their own or joined by commas in one line, as a proxy may fold them; a
// malformed value, an empty element of a comma-separated line, more than
// guard.MaxTokensPerRequest values, or two naming one resource with
// different tokens, is answered with 400 Bad Request and a text/plain body
// saying what is wrong, and next is not called, no token is mint-checked
// and nothing is written. A request without the header goes to next with no token in its
// context, for next to decide, unless RequireToken or WithWriter was
// given. Under WithMintCheck a token never minted (any one of several) is
// refused before next (see WriteRefused). Under WithPropagator the request's trace context is
// read first, so the mint check and next run in the caller's trace.
func Middleware(next http.Handler, opts ...Option) http.Handler {
	var c carrier.Config
	for _, o := range opts {
		o.middleware(&c)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.Propagator != nil {
			r = r.WithContext(c.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		vs, folded, err := values(r.Header.Values(TokenHeader))
		if err != nil {
			http.Error(w, oneLine(err), http.StatusBadRequest)
			return
		}
		switch {
		case len(vs) == 0 && c.Require:
			http.Error(w, fmt.Sprintf("%v: send a %s header", guard.ErrNoToken, TokenHeader), http.StatusPreconditionRequired)
			return
		case len(vs) == 0:
			next.ServeHTTP(w, r)
			return
		}
		toks, err := tokens.Parse(vs, Parse)
		switch {
		case errors.Is(err, tokens.ErrConflict) || errors.Is(err, tokens.ErrTooMany):
			err = fmt.Errorf("%w: %w", ErrMalformedHeader, err)
		case err != nil && folded:
			err = fmt.Errorf("%w (a line is split at its commas, one value each: a comma in a resource is written %%2C)", err)
		}
		if err != nil {
			http.Error(w, oneLine(err), http.StatusBadRequest)
			return
		}
		for _, t := range toks {
			if err := c.Mint.Check(r.Context(), t.Resource, t.Value); err != nil {
				WriteRefused(w, t.Resource, err)
				return
			}
		}
		ctx := tokens.Context(r.Context(), toks)
		r = r.WithContext(ctx)
		if c.Writer == nil {
			next.ServeHTTP(w, r)
			return
		}
		err = tokens.Write(ctx, c.Writer, toks, func() error {
			next.ServeHTTP(w, r)
			return nil
		})
		if err != nil && !WriteRefused(w, toks[0].Resource, err) {
			http.Error(w, "httpguard: "+err.Error(), http.StatusServiceUnavailable)
		}
	})
}

// values returns the Fencing-Token values of a request's header lines, one
// per list element: a proxy may fold several lines into one, joined by
// commas (RFC 9110, section 5.3), and no value holds a comma (Parse
// refuses one: a resource's comma is written %2C), so each element,
// between optional whitespace, is one value; folded says a line was split.
// An empty element is an error wrapping ErrMalformedHeader. It stops after
// guard.MaxTokensPerRequest+1 values, which tokens.Parse refuses whole, so
// a long line costs no more.
func values(lines []string) (vs []string, folded bool, err error) {
	for _, line := range lines {
		if strings.Contains(line, ",") {
			folded = true
			break
		}
	}
	if !folded {
		return lines, false, nil
	}
	for _, line := range lines {
		for rest, more := line, true; more; {
			var v string
			v, rest, more = strings.Cut(rest, ",")
			if v = strings.Trim(v, " \t"); v == "" {
				return nil, true, fmt.Errorf("%w: an empty element in a comma-separated list", ErrMalformedHeader)
			}
			if vs = append(vs, v); len(vs) > guard.MaxTokensPerRequest {
				return vs, true, nil
			}
		}
	}
	return vs, true, nil
}
