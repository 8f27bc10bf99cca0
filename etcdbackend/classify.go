package etcdbackend

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fencing-go/fencing/backend"
)

// Telling "never sent" from "outcome unknown".
//
// The etcd client waits for a ready connection (gRPC WaitForReady), so a
// request to a server that refuses the dial, or through a client that is
// closed, fails when its context ends or at once, with the context's error
// or codes.Canceled: the same errors as a request whose answer is lost after
// it was sent. The error alone cannot tell them apart.
//
// gRPC can: it fills a grpc.Peer call option only once the call got a stream
// on a connection (the step before its request is written). A mutating
// request whose Peer is still empty when it fails provably never left the
// client. Every mutating Txn goes through trackedKV, which attaches such a
// Peer, and keepAliveOnce tells stream set-up from the exchange itself.

// peerKey is the context key of the *peer.Peer that trackedKV fills.
type peerKey struct{}

// track returns ctx carrying a Peer that gRPC fills once a request made with
// it reaches a connection.
func track(ctx context.Context) (context.Context, *peer.Peer) {
	p := new(peer.Peer)
	return context.WithValue(ctx, peerKey{}, p), p
}

// reached reports whether a tracked request got onto a connection.
func reached(p *peer.Peer) bool { return p.Addr != nil }

// trackedKV is the client's own KV service (with its retry policy: a Txn is
// resent only when it never left) that records in a tracked context's Peer
// whether a Txn reached a connection.
type trackedKV struct{ pb.KVClient }

func (k trackedKV) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	if p, ok := ctx.Value(peerKey{}).(*peer.Peer); ok {
		opts = append(opts, grpc.Peer(p))
	}
	return k.KVClient.Txn(ctx, in, opts...)
}

// ambiguous reports whether err, from a request that reached a connection,
// leaves its outcome unknown: anything but an answer from the server that it
// refused the request. etcd's Unavailable answers (no leader, leader
// changed, request timed out) stay ambiguous, as some come after the
// proposal may have been committed.
func ambiguous(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Aborted, codes.Internal:
		return true
	}
	return false
}

func code(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}

// mutationError wraps the error of a mutating request; sent says whether
// the request reached a connection.
func mutationError(op string, err error, sent bool) error {
	if sent && ambiguous(err) {
		return fmt.Errorf("%w: etcdbackend: %s: %w", backend.ErrOutcomeUnknown, op, err)
	}
	return fmt.Errorf("etcdbackend: %s: %w", op, err)
}
