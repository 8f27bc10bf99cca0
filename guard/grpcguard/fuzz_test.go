package grpcguard_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
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
// InvalidArgument or hands the handler the tokens the values name. One
// value's token has the value's number's decimal digits exactly, and the
// client interceptor would send it in the same form. Two values are taken
// only when each is taken alone, and then as the set of both: two
// resources, or one resource with one token.
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
	f.Add(`1; resource="a"`, `2; resource="b"`, true)
	f.Add(`1; resource="a"`, `1;resource="a"`, true)
	f.Fuzz(func(t *testing.T, v, second string, two bool) {
		if two {
			both, err := incoming(v, second)
			one, err1 := incoming(v)
			other, err2 := incoming(second)
			switch {
			case err != nil && (err1 == nil && err2 == nil && one[0].Resource != other[0].Resource):
				t.Fatalf("%q and %q: refused (%v), though each is taken alone, for two resources", v, second, err)
			case err != nil:
				return
			case err1 != nil || err2 != nil:
				t.Fatalf("%q and %q were taken as %v, though one alone is refused (%v, %v)", v, second, both, err1, err2)
			}
			want := append(one, other...)
			sort.Slice(want, func(i, j int) bool { return want[i].Resource < want[j].Resource })
			if want[0] == want[1] {
				want = want[:1]
			}
			if !reflect.DeepEqual(both, want) {
				t.Fatalf("%q and %q were taken as %v, want %v", v, second, both, want)
			}
			return
		}
		toks, err := incoming(v)
		if err != nil {
			return
		}
		if len(toks) != 1 {
			t.Fatalf("%q was taken as %v, want one token", v, toks)
		}
		resource, token := toks[0].Resource, toks[0].Value
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

// incoming runs the server interceptor on a call with fencing-token values
// vs and returns the tokens its handler's context carried, or the
// interceptor's error (which must be InvalidArgument, with no handler
// call).
func incoming(vs ...string) ([]guard.Token, error) {
	md := metadata.MD{}
	md.Append(grpcguard.TokenKey, vs...)
	ctx := metadata.NewIncomingContext(context.Background(), md)
	var toks []guard.Token
	var called bool
	handler := func(ctx context.Context, _ any) (any, error) {
		called = true
		toks = guard.TokensFromContext(ctx)
		return nil, nil
	}
	_, err := grpcguard.UnaryServerInterceptor(grpcguard.RequireToken())(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/m"}, handler)
	if err != nil && (called || status.Code(err) != codes.InvalidArgument) {
		panic(fmt.Sprintf("%q: %v (handler called: %v), want InvalidArgument and no call", vs, err, called))
	}
	return toks, err
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
