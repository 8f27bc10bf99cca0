package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/internal/carrier"
	"github.com/fencing-go/fencing/guard/internal/header"
	"github.com/fencing-go/fencing/guard/internal/tokens"
)

// Metadata keys and the stale token's error details.
const (
	// TokenKey is the metadata key of the caller's token, in the syntax of
	// the HTTP Fencing-Token header: `42; resource="orders%2F42"`.
	TokenKey = "fencing-token"
	// Reason is the ErrorInfo reason of a status refusing a stale token.
	Reason = "STALE_FENCING_TOKEN"
	// Domain is the ErrorInfo domain of a status refusing a stale token.
	Domain = "github.com/fencing-go/fencing"
)

// Option configures the server interceptors.
type Option interface{ server(*carrier.Config) }

// ClientOption configures the client interceptors. Every ClientOption is
// an Option too: it configures both ends of the carrier alike.
type ClientOption interface {
	Option
	client(*clientConfig)
}

// option is an Option of the server interceptors alone.
type option func(*carrier.Config)

func (o option) server(c *carrier.Config) { o(c) }

type clientConfig struct {
	propagator propagation.TextMapPropagator // nil: none
}

// WithPropagator makes the client interceptors send each call's trace
// context in its metadata, written by p (propagation.TraceContext{} for
// the W3C traceparent and tracestate keys, or a composite with baggage),
// and the server interceptors read it back with p into the handler's
// context, where the handler's spans find their remote parent: a trace
// then goes from the holder's lease (fencing.SpanHeld) to the service's
// write. Without it, or with a nil p, neither end reads or writes trace
// metadata.
func WithPropagator(p propagation.TextMapPropagator) ClientOption {
	return propagatorOption{p}
}

type propagatorOption struct{ p propagation.TextMapPropagator }

func (o propagatorOption) server(c *carrier.Config) { c.Propagator = o.p }
func (o propagatorOption) client(c *clientConfig)   { c.propagator = o.p }

// metadataCarrier is a propagation.TextMapCarrier on gRPC metadata (whose
// keys are lower case, as the propagators' are).
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if vs := metadata.MD(m).Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// RequireToken makes the server interceptors refuse a call without a
// token with codes.FailedPrecondition (the handler is not called).
func RequireToken() Option { return option(carrier.RequireToken) }

// WithWriter makes the server interceptors run the handler under w (a
// *guard.Memory): the call's token is admitted for its resource and the
// handler runs as one step, under the resource's lock; a stale token is
// refused (see the package doc) and the handler is not called. A call with
// several tokens has them all admitted as one step with the handler: w's
// writes nest in resource order (so two such calls cannot deadlock), a
// stale one refuses the call, and no fence rises. It implies
// RequireToken. The fence rises when a handler returns nil, and not when
// it returns an error. For a resource in the server's own memory only: a
// database write is fenced by the store guard inside the handler.
func WithWriter(w guard.Writer) Option {
	return option(carrier.WithWriter(w))
}

// WithMintCheck makes the server interceptors refuse a token the lock
// store never minted (see guard.MintCheck) before the handler is called:
// codes.PermissionDenied when it is above the key's highest minted token
// (guard.ErrNotMinted), codes.Unavailable when the lock store could not be
// read (guard.ErrMintUnchecked). A token already seen minted costs no
// read, so a holder pays one read of the lock store for its first call to
// this process. It is the default to use for a service that accepts tokens
// from the network; it does not authenticate the caller (see
// docs/across-services.md).
func WithMintCheck(mc *guard.MintCheck) Option { return option(carrier.WithMintCheck(mc)) }

// UnaryClientInterceptor returns an interceptor that sends the context's
// tokens (guard.TokensFromContext: fencing.Held.Context carries one,
// fencing.HeldMany.Context one per key) in the fencing-token metadata, one
// value per token in resource order, replacing any the caller set. A context without a token goes
// out without it. A token 0 or a bad resource name is not sent: the call
// fails with an error wrapping guard.ErrInvalidToken or
// backend.ErrInvalidKey. A status refusing the token as stale comes back as
// an error wrapping a *guard.StaleTokenError (errors.Is
// guard.ErrStaleToken) that keeps its status (status.FromError). With
// WithPropagator every call also carries its context's trace context (a
// fencing.Held's context carries the held lease's span).
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := newClientConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, err := c.outgoing(ctx)
		if err != nil {
			return err
		}
		return fromStatus(invoker(ctx, method, req, reply, cc, opts...))
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: the token
// goes in the stream's metadata, and a stale status from the stream's
// RecvMsg comes back as UnaryClientInterceptor's error.
func StreamClientInterceptor(opts ...ClientOption) grpc.StreamClientInterceptor {
	c := newClientConfig(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, err := c.outgoing(ctx)
		if err != nil {
			return nil, err
		}
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, fromStatus(err)
		}
		return clientStream{s}, nil
	}
}

type clientStream struct{ grpc.ClientStream }

func (s clientStream) RecvMsg(m any) error { return fromStatus(s.ClientStream.RecvMsg(m)) }

func newClientConfig(opts []ClientOption) *clientConfig {
	c := &clientConfig{}
	for _, o := range opts {
		o.client(c)
	}
	return c
}

// outgoing puts ctx's token, and under WithPropagator its trace context, in
// its outgoing metadata.
func (c *clientConfig) outgoing(ctx context.Context) (context.Context, error) {
	toks := guard.TokensFromContext(ctx)
	if len(toks) == 0 && c.propagator == nil {
		return ctx, nil
	}
	vs := make([]string, len(toks))
	for i, t := range toks {
		if err := guard.CheckAdmit(t.Resource, t.Value); err != nil {
			return nil, fmt.Errorf("grpcguard: not sending the context's token: %w", err)
		}
		vs[i] = header.Format(t.Resource, t.Value)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	if len(toks) > 0 {
		md.Set(TokenKey, vs...)
	}
	if c.propagator != nil {
		c.propagator.Inject(ctx, metadataCarrier(md))
	}
	return metadata.NewOutgoingContext(ctx, md), nil
}

// UnaryServerInterceptor returns an interceptor that puts the call's
// fencing-token metadata in the handler's context (guard.TokenFromContext
// for one token, guard.TokensFromContext for several: a call may carry one
// value per resource, up to guard.MaxTokensPerRequest, as the client
// interceptors send a fencing.HeldMany's tokens). Malformed metadata, token
// 0, a bad resource name, more than guard.MaxTokensPerRequest values, or
// two values naming one resource with different tokens are refused with
// codes.InvalidArgument, before any token is mint-checked; under
// WithMintCheck every token is checked. A
// call without a token reaches the handler with none, for it to decide,
// unless RequireToken or WithWriter was given. Under WithPropagator the
// handler's context carries the call's trace context too.
//
// A handler error that wraps guard.ErrStaleToken (and is not a status
// already) is answered with codes.FailedPrecondition and an ErrorInfo
// naming the fence (see the package doc).
func UnaryServerInterceptor(opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, toks, err := c.incoming(ctx)
		if err != nil {
			return nil, err
		}
		if c.Writer == nil || len(toks) == 0 {
			reply, err := handler(ctx, req)
			return reply, Status(err)
		}
		var reply any
		err = tokens.Write(ctx, c.Writer, toks, func() error {
			var err error
			reply, err = handler(ctx, req)
			return err
		})
		return reply, Status(err)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: the
// stream's Context carries the tokens, and under WithWriter the whole
// stream handler runs under the resources' locks.
func StreamServerInterceptor(opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, toks, err := c.incoming(ss.Context())
		if err != nil {
			return err
		}
		ss = serverStream{ss, ctx}
		if c.Writer == nil || len(toks) == 0 {
			return Status(handler(srv, ss))
		}
		return Status(tokens.Write(ctx, c.Writer, toks, func() error { return handler(srv, ss) }))
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

// config is the server interceptors' options, which incoming reads.
type config struct{ carrier.Config }

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		o.server(&c.Config)
	}
	return c
}

// incoming returns ctx with the call's tokens, and the tokens sorted by
// resource; none when the call has none (and none is required). Under WithPropagator the
// call's trace context is read first, so the mint check and the handler
// run in the caller's trace.
func (c *config) incoming(ctx context.Context) (context.Context, []guard.Token, error) {
	if c.Propagator != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		ctx = c.Propagator.Extract(ctx, metadataCarrier(md))
	}
	vs := metadata.ValueFromIncomingContext(ctx, TokenKey)
	switch {
	case len(vs) == 0 && c.Require:
		return nil, nil, status.Errorf(codes.FailedPrecondition, "%v: send %s metadata", guard.ErrNoToken, TokenKey)
	case len(vs) == 0:
		return ctx, nil, nil
	}
	toks, err := tokens.Parse(vs, parse)
	if errors.Is(err, tokens.ErrConflict) || errors.Is(err, tokens.ErrTooMany) {
		err = status.Errorf(codes.InvalidArgument, "grpcguard: malformed %s metadata: %v", TokenKey, err)
	}
	if err != nil {
		return nil, nil, err
	}
	for _, t := range toks {
		if err := c.Mint.Check(ctx, t.Resource, t.Value); err != nil {
			return nil, nil, Status(err)
		}
	}
	return tokens.Context(ctx, toks), toks, nil
}

// parse returns the resource and token of one fencing-token value, or a
// codes.InvalidArgument status saying what is wrong.
func parse(v string) (string, uint64, error) {
	resource, token, err := header.Parse(v)
	if err != nil {
		return "", 0, status.Errorf(codes.InvalidArgument, "grpcguard: malformed %s metadata: %s", TokenKey, header.Detail(err))
	}
	if err := guard.CheckAdmit(resource, token); err != nil {
		return "", 0, status.Errorf(codes.InvalidArgument, "grpcguard: malformed %s metadata: %v", TokenKey, err)
	}
	return resource, token, nil
}

// FormatFence returns the "fence" metadata of a stale token's ErrorInfo:
// fence and resource in the fencing-token syntax.
func FormatFence(resource string, fence uint64) string { return header.Format(resource, fence) }

// Status returns err as a handler should return it. An err that wraps
// guard.ErrNotMinted becomes codes.PermissionDenied, one that wraps
// guard.ErrMintUnchecked codes.Unavailable, with err's message (unless err
// is a gRPC status already). An err that wraps
// guard.ErrStaleToken, and is not a gRPC status already, becomes a status
// with codes.FailedPrecondition, err's message, and an ErrorInfo (Reason,
// Domain) whose metadata hold "token", the refused token, and "fence", the
// fence and its resource in the fencing-token syntax (a fence of 0 when err
// does not say it). Any other err is returned as it is. The server
// interceptors apply it to their handler's error.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, guard.ErrNotMinted):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, guard.ErrMintUnchecked):
		return status.Error(codes.Unavailable, err.Error())
	case !errors.Is(err, guard.ErrStaleToken):
		return err
	}
	stale := &guard.StaleTokenError{} // fence 0: err does not say it
	errors.As(err, &stale)
	st, derr := status.New(codes.FailedPrecondition, err.Error()).WithDetails(&errdetails.ErrorInfo{
		Reason: Reason,
		Domain: Domain,
		Metadata: map[string]string{
			"token": strconv.FormatUint(stale.Token, 10),
			"fence": FormatFence(stale.Resource, stale.Fence),
		},
	})
	if derr != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return st.Err()
}

// fromStatus turns a status refusing a stale token (Status's) into an
// error wrapping a *guard.StaleTokenError and the status.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Reason != Reason || info.Domain != Domain {
			continue
		}
		resource, fence, perr := header.Parse(info.Metadata["fence"])
		token, terr := strconv.ParseUint(info.Metadata["token"], 10, 64)
		if perr != nil || terr != nil {
			return err
		}
		return &staleStatus{StaleTokenError: &guard.StaleTokenError{Resource: resource, Token: token, Fence: fence}, st: st}
	}
	return err
}

// staleStatus is a stale token's status on the client side: errors.As finds
// the *guard.StaleTokenError, status.FromError the status.
type staleStatus struct {
	*guard.StaleTokenError
	st *status.Status
}

func (e *staleStatus) Unwrap() error              { return e.StaleTokenError }
func (e *staleStatus) GRPCStatus() *status.Status { return e.st }
