package grpcguard_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/grpcguard"
)

// FuzzIncoming: the server interceptor never panics on fencing-token
// metadata (one value, or two); it either refuses the call with
// InvalidArgument or hands the handler the one token the value names, whose
// decimal digits are the value's number exactly, and which the client
// interceptor would send in the same form.
func FuzzIncoming(f *testing.F) {
	for _, v := range []string{
		`42; resource="orders%2F42"`,
		"18446744073709551615 \t;\t resource=\"%00%ff\"",
		`9223372036854775807; resource="orders%2F42"`,
		`042; resource="a"`,
		`42; resource="a"; x=1`,
		`0; resource="a"`,
	} {
		f.Add(v, "", false)
	}
	f.Add(`1; resource="a"`, `2; resource="a"`, true)
	f.Fuzz(func(t *testing.T, v, second string, two bool) {
		md := metadata.Pairs(grpcguard.TokenKey, v)
		if two {
			md.Append(grpcguard.TokenKey, second)
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		var resource string
		var token uint64
		var called bool
		handler := func(ctx context.Context, _ any) (any, error) {
			called = true
			resource, token, _ = guard.TokenFromContext(ctx)
			return nil, nil
		}
		_, err := grpcguard.UnaryServerInterceptor(grpcguard.RequireToken())(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/m"}, handler)
		if err != nil {
			if called || status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%q: %v (handler called: %v), want InvalidArgument and no call", md[grpcguard.TokenKey], err, called)
			}
			return
		}
		if two {
			t.Fatalf("two values %q were taken", md[grpcguard.TokenKey])
		}
		num, _, _ := strings.Cut(v, ";")
		if got := strings.Trim(num, " \t"); got != strconv.FormatUint(token, 10) || token == 0 {
			t.Fatalf("%q was taken as token %d", v, token)
		}
		out, err := outgoingValue(resource, token)
		if err != nil || out != grpcguard.FormatFence(resource, token) {
			t.Fatalf("%q: the client would send %q, %v", v, out, err)
		}
	})
}

// outgoingValue returns the fencing-token value the client interceptor
// sends for resource and token.
func outgoingValue(resource string, token uint64) (string, error) {
	var sent string
	invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		if vs := md.Get(grpcguard.TokenKey); len(vs) == 1 {
			sent = vs[0]
		}
		return nil
	}
	err := grpcguard.UnaryClientInterceptor()(guard.ContextWithToken(context.Background(), resource, token), "/m", nil, nil, nil, invoker)
	return sent, err
}
