package grpcguard_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/grpcguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store is a test service over a guard.Memory: Set writes one value,
// the client stream Sets writes each value it receives, each through the
// guard with the context's token (when the store guards itself), and the
// handlers record the token they saw.
type store struct {
	g        *guard.Memory
	self     bool // the handler writes through g; else the interceptor's WithWriter does
	mu       sync.Mutex
	values   map[string]string
	calls    int
	resource string
	token    uint64
	hadToken bool
	tokens   []guard.Token // guard.TokensFromContext
	tracer   trace.Tracer  // when set, each write is a span "write"
}

func (s *store) set(ctx context.Context, v string) error {
	if s.tracer != nil {
		_, span := s.tracer.Start(ctx, "write")
		defer span.End()
	}
	s.mu.Lock()
	s.calls++
	s.resource, s.token, s.hadToken = guard.TokenFromContext(ctx)
	s.tokens = guard.TokensFromContext(ctx)
	resource := s.resource
	s.mu.Unlock()
	write := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.values[resource] = v
		return nil
	}
	if !s.self {
		return write()
	}
	if !s.hadToken {
		return status.Error(codes.FailedPrecondition, "no token")
	}
	return s.g.Write(ctx, resource, s.token, write)
}

type storeServer interface {
	set(context.Context, string) error
}

var storeDesc = grpc.ServiceDesc{
	ServiceName: "fencing.test.Store",
	HandlerType: (*storeServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Set",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return &emptypb.Empty{}, srv.(storeServer).set(ctx, req.(*wrapperspb.StringValue).Value)
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/fencing.test.Store/Set"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Sets",
		ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			for {
				in := new(wrapperspb.StringValue)
				err := ss.RecvMsg(in)
				if errors.Is(err, io.EOF) {
					return ss.SendMsg(&emptypb.Empty{})
				}
				if err != nil {
					return err
				}
				if err := srv.(storeServer).set(ss.Context(), in.Value); err != nil {
					return err
				}
			}
		},
	}},
}

// serve runs s on a real gRPC server on loopback TCP, with the server
// interceptors, and returns a client connection with the client ones.
func serve(t *testing.T, s *store, opts ...grpcguard.Option) *grpc.ClientConn {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor(opts...)),
		grpc.StreamInterceptor(grpcguard.StreamServerInterceptor(opts...)))
	srv.RegisterService(&storeDesc, s)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-served })
	return dial(t, lis.Addr().String())
}

// dial returns a client connection to target with the client interceptors.
func dial(t *testing.T, target string, opts ...grpcguard.ClientOption) *grpc.ClientConn {
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcguard.UnaryClientInterceptor(opts...)),
		grpc.WithStreamInterceptor(grpcguard.StreamClientInterceptor(opts...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func newStore(self bool) *store {
	return &store{g: guard.NewMemory(), self: self, values: map[string]string{}}
}

func set(ctx context.Context, conn *grpc.ClientConn, v string) error {
	return conn.Invoke(ctx, "/fencing.test.Store/Set", wrapperspb.String(v), new(emptypb.Empty))
}

func sets(ctx context.Context, conn *grpc.ClientConn, vs ...string) error {
	st, err := conn.NewStream(ctx, &storeDesc.Streams[0], "/fencing.test.Store/Sets")
	if err != nil {
		return err
	}
	for _, v := range vs {
		if err := st.SendMsg(wrapperspb.String(v)); err != nil {
			break // the status comes from RecvMsg
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	return st.RecvMsg(new(emptypb.Empty))
}

func tokenCtx(resource string, token uint64) context.Context {
	return guard.ContextWithToken(context.Background(), resource, token)
}

func TestCarry(t *testing.T) {
	s := newStore(true)
	conn := serve(t, s)
	for _, res := range []string{"orders/42", "a b\"c;%\x00\xff", strings.Repeat("k", backend.MaxKeyLength)} {
		for name, call := range map[string]func(context.Context) error{
			"unary":  func(ctx context.Context) error { return set(ctx, conn, "v") },
			"stream": func(ctx context.Context) error { return sets(ctx, conn, "v", "w") },
		} {
			if err := call(tokenCtx(res, 1<<63+5)); err != nil {
				t.Fatalf("%s, resource %q: %v", name, res, err)
			}
			if !s.hadToken || s.resource != res || s.token != 1<<63+5 {
				t.Fatalf("%s, resource %q: the handler saw %q, %d, %v", name, res, s.resource, s.token, s.hadToken)
			}
		}
	}
	// No token: the handler decides (here: FailedPrecondition of its own).
	err := set(context.Background(), conn, "v")
	if status.Code(err) != codes.FailedPrecondition || s.hadToken || errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("no token: %v, handler saw a token: %v", err, s.hadToken)
	}
	// The caller's own metadata survives; a fencing-token it set is replaced.
	ctx := metadata.AppendToOutgoingContext(tokenCtx("r", 9), "other", "x", grpcguard.TokenKey, `1; resource="r"`)
	if err := set(ctx, conn, "v"); err != nil || s.token != 9 {
		t.Fatalf("with other metadata: %v, handler saw token %d, want 9", err, s.token)
	}
}

func TestStale(t *testing.T) {
	s := newStore(true)
	conn := serve(t, s)
	if err := set(tokenCtx("orders/42", 5), conn, "five"); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context) error{
		"unary":  func(ctx context.Context) error { return set(ctx, conn, "late") },
		"stream": func(ctx context.Context) error { return sets(ctx, conn, "late", "later") },
	} {
		err := call(tokenCtx("orders/42", 4))
		checkStale(t, name, err, 4, 5)
	}
	if v := s.values["orders/42"]; v != "five" {
		t.Fatalf("value %q after stale writes, want five", v)
	}
}

// checkStale checks that err is a stale refusal of token below fence for
// orders/42, both as a Go error and as a gRPC status.
func checkStale(t *testing.T, name string, err error, token, fence uint64) {
	t.Helper()
	var stale *guard.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, guard.ErrStaleToken) || stale.Token != token || stale.Fence != fence || stale.Resource != "orders/42" {
		t.Fatalf("%s: got %v (%+v), want a *StaleTokenError of token %d below fence %d", name, err, stale, token, fence)
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		t.Fatalf("%s: status %v, want FailedPrecondition", name, st)
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if info == nil || info.Reason != grpcguard.Reason || info.Domain != grpcguard.Domain ||
		info.Metadata["fence"] != grpcguard.FormatFence("orders/42", fence) || info.Metadata["token"] == "" {
		t.Fatalf("%s: ErrorInfo %v", name, info)
	}
}

func TestMalformed(t *testing.T) {
	s := newStore(true)
	conn := serve(t, s)
	for _, vs := range [][]string{
		{"42"},
		{`42; resource="a/b"`},
		{`0; resource="a"`},
		{`1; resource=""`},
		{`1; resource="a"`, `2; resource="a"`},
	} {
		md := metadata.MD{grpcguard.TokenKey: vs}
		ctx := metadata.NewOutgoingContext(context.Background(), md) // no token in the context: sent as set
		err := set(ctx, conn, "v")
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "malformed fencing-token metadata") {
			t.Errorf("%q: got %v, want InvalidArgument", vs, err)
		}
	}
	if s.calls != 0 {
		t.Errorf("the handler ran %d times for malformed metadata", s.calls)
	}
}

func TestClientRefusesBadTokens(t *testing.T) {
	s := newStore(true)
	conn := serve(t, s)
	for _, tc := range []struct {
		resource string
		token    uint64
		want     error
	}{
		{"r", 0, guard.ErrInvalidToken},
		{"", 1, backend.ErrInvalidKey},
	} {
		if err := set(tokenCtx(tc.resource, tc.token), conn, "v"); !errors.Is(err, tc.want) {
			t.Errorf("unary, token %d, resource %q: got %v, want %v", tc.token, tc.resource, err, tc.want)
		}
		if err := sets(tokenCtx(tc.resource, tc.token), conn, "v"); !errors.Is(err, tc.want) {
			t.Errorf("stream, token %d, resource %q: got %v, want %v", tc.token, tc.resource, err, tc.want)
		}
	}
	if s.calls != 0 {
		t.Errorf("%d calls reached the handler", s.calls)
	}
}

// WithWriter runs the handler under the guard: the store does not check
// tokens itself, and a stale call never runs.
func TestWithWriter(t *testing.T) {
	s := newStore(false)
	conn := serve(t, s, grpcguard.WithWriter(s.g))
	if err := set(tokenCtx("orders/42", 3), conn, "three"); err != nil {
		t.Fatal(err)
	}
	if err := sets(tokenCtx("orders/42", 3), conn, "three again"); err != nil {
		t.Fatal(err)
	}
	calls := s.calls
	checkStale(t, "unary", set(tokenCtx("orders/42", 2), conn, "late"), 2, 3)
	checkStale(t, "stream", sets(tokenCtx("orders/42", 2), conn, "late"), 2, 3)
	if s.calls != calls || s.values["orders/42"] != "three again" || s.g.Fence("orders/42") != 3 {
		t.Fatalf("after stale calls: %d handler calls (want %d), value %q, fence %d", s.calls, calls, s.values["orders/42"], s.g.Fence("orders/42"))
	}
	err := set(context.Background(), conn, "none")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no fencing token") {
		t.Fatalf("no token under WithWriter: %v, want FailedPrecondition", err)
	}
}

func TestStatus(t *testing.T) {
	if err := grpcguard.Status(nil); err != nil {
		t.Fatalf("Status(nil) = %v", err)
	}
	other := errors.New("other")
	if err := grpcguard.Status(other); err != other {
		t.Fatalf("Status(other) = %v", err)
	}
	st, _ := status.FromError(grpcguard.Status(guard.StaleError("orders/42", 1, 2)))
	if st.Code() != codes.FailedPrecondition || len(st.Details()) != 1 {
		t.Fatalf("Status(stale) = %v", st)
	}
}

// A FailedPrecondition whose ErrorInfo has the stale token's reason but
// another domain is another service's error: the client interceptor passes
// it on as it is, never as a stale token. The reason is checked too.
func TestStaleNeedsOwnDomain(t *testing.T) {
	details := func(reason, domain string) error {
		st, err := status.New(codes.FailedPrecondition, "refused").WithDetails(&errdetails.ErrorInfo{
			Reason: reason, Domain: domain,
			Metadata: map[string]string{"token": "2", "fence": grpcguard.FormatFence("orders/42", 3)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	call := func(err error) error {
		invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return err }
		return grpcguard.UnaryClientInterceptor()(tokenCtx("orders/42", 2), "/m", nil, nil, nil, invoker)
	}
	for _, c := range []struct {
		reason, domain string
		stale          bool
	}{
		{grpcguard.Reason, grpcguard.Domain, true},
		{grpcguard.Reason, "example.com/another-service", false},
		{grpcguard.Reason, "", false},
		{"OTHER_REASON", grpcguard.Domain, false},
	} {
		sent := details(c.reason, c.domain)
		err := call(sent)
		var stale *guard.StaleTokenError
		if got := errors.As(err, &stale); got != c.stale || errors.Is(err, guard.ErrStaleToken) != c.stale {
			t.Errorf("reason %q, domain %q: %v reads as stale: %v, want %v", c.reason, c.domain, err, got, c.stale)
		}
		if !c.stale && err != sent {
			t.Errorf("reason %q, domain %q: the status came back as %v, want it as it was", c.reason, c.domain, err)
		}
		if c.stale && (stale.Fence != 3 || stale.Token != 2 || stale.Resource != "orders/42" || status.Code(err) != codes.FailedPrecondition) {
			t.Errorf("own domain: %+v, code %v", stale, status.Code(err))
		}
	}
}
