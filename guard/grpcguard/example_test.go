package grpcguard_test

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/grpcguard"
)

// The client's interceptors send the context's token; the server's put it
// in the handler's context, where the handler passes it to its guard with
// the write (storeDesc is this package's test service: its Set handler
// writes through a guard.Memory). A stale token comes back as
// FailedPrecondition and as a *guard.StaleTokenError.
func Example() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor()),
		grpc.StreamInterceptor(grpcguard.StreamServerInterceptor()))
	s := newStore(true)
	srv.RegisterService(&storeDesc, s)
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcguard.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(grpcguard.StreamClientInterceptor()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	// In a holder, the context is held.Context(): it carries the token.
	ctx2 := guard.ContextWithToken(context.Background(), "orders/42", 2)
	ctx1 := guard.ContextWithToken(context.Background(), "orders/42", 1)
	fmt.Println("token 2:", set(ctx2, conn, "200"))
	err = set(ctx1, conn, "150") // the previous holder, late
	var stale *guard.StaleTokenError
	fmt.Println("token 1:", status.Code(err), errors.As(err, &stale), stale.Fence)
	fmt.Println("value:", s.values["orders/42"])
	// Output:
	// token 2: <nil>
	// token 1: FailedPrecondition true 2
	// value: 200
}
