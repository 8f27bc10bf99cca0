// Package grpcguard carries a fencing token over gRPC, from the holder of a
// lease to the service that does the write.
//
// The client dials with UnaryClientInterceptor and StreamClientInterceptor:
// every call whose context carries a token (a fencing.Held's Context, or
// one made with guard.ContextWithToken) sends it in the fencing-token
// metadata, and one whose context carries several (a fencing.HeldMany's)
// sends one value per token. The server runs UnaryServerInterceptor and
// StreamServerInterceptor, which put the token in the handler's context,
// where the handler finds it with guard.TokenFromContext and passes it to
// its store guard with the write:
//
//	conn, err := grpc.NewClient(addr,
//		grpc.WithUnaryInterceptor(grpcguard.UnaryClientInterceptor()),
//		grpc.WithStreamInterceptor(grpcguard.StreamClientInterceptor()), ...)
//
//	srv := grpc.NewServer(
//		grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor()),
//		grpc.StreamInterceptor(grpcguard.StreamServerInterceptor()))
//
//	func (s *server) SetTotal(ctx context.Context, req *pb.SetTotalRequest) (*pb.SetTotalReply, error) {
//		resource, token, ok := guard.TokenFromContext(ctx)
//		if !ok {
//			return nil, status.Error(codes.FailedPrecondition, "no fencing token")
//		}
//		// The check and the write in one Redis script: a stale token
//		// writes nothing, and the interceptor answers FailedPrecondition.
//		err := s.fences.Write(ctx, resource, token, redisguard.Set(key, req.Total))
//		return &pb.SetTotalReply{}, err
//	}
//
// # On the wire
//
// The metadata value has the syntax of the HTTP Fencing-Token header (see
// guard/httpguard): `fencing-token: 42; resource="orders%2F42"`, the
// resource percent-encoded byte by byte. A call carries one value per
// resource (a fencing.HeldMany's context, one per key; see
// guard.TokensFromContext). Malformed metadata, token 0, a bad resource
// name, or two values naming one resource with different tokens are
// refused with codes.InvalidArgument, and the handler is not called.
//
// A stale token is refused with codes.FailedPrecondition: the call must not
// be retried as it is (the holder has lost its lease and must take a new
// one, with a new token), which is that code's meaning; codes.Aborted would
// invite a retry, and a stale holder that retries is the bug fencing
// exists to stop. The status carries an ErrorInfo with Reason
// "STALE_FENCING_TOKEN", Domain "github.com/fencing-go/fencing" and
// metadata "token" (the refused token, decimal) and "fence" (the fence in
// the fencing-token syntax, `57; resource="orders%2F42"`; 0 when the
// service did not learn it). The client interceptors turn it back into an
// error wrapping a *guard.StaleTokenError (errors.Is guard.ErrStaleToken)
// that still answers status.FromError.
//
// # A check before the handler is not a check with the write
//
// An interceptor that admitted the token and then let the handler write to
// a database would not fence anything: the handler can stall between the
// two, a newer holder can write meanwhile, and the stale write lands on top
// of it. The check belongs to the store's own atomic step with the write
// (sqlguard, etcdguard, redisguard), inside the handler, as above. Only for
// a resource in the server's own memory can the interceptor do the whole
// step: WithWriter(guard.NewMemory()) runs the handler under the
// resource's lock, as guard.Memory.Write does.
//
// A service should also write only the resource the token names.
//
// # Tokens from the network
//
// A token is not a credential. A server that takes tokens from the network
// authenticates its callers (mTLS) and refuses tokens the lock store never
// minted with WithMintCheck: codes.PermissionDenied, or codes.Unavailable
// when the lock store cannot be read (see guard.MintCheck).
package grpcguard
