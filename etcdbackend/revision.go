package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// ErrRevisionRegressed is returned (wrapped) when etcd answers at a lower
// revision than an earlier answer to the same Backend: the cluster was
// restored from a snapshot without bumping its revision (etcdutl snapshot
// restore without --bump-revision), or replaced by another one at the same
// endpoints. Tokens are revisions, so such a cluster can mint again tokens
// this backend already handed out: the backend fails closed. A mutating
// request answered so also wraps backend.ErrOutcomeUnknown (it may have
// been applied). Only a new Backend, after an operator has made sure the
// revision is above every token ever issued, uses the cluster again.
var ErrRevisionRegressed = errors.New("etcdbackend: etcd revision went back (cluster restored without --bump-revision?)")

// revisionKV is the client's KV service that remembers the highest revision
// of any response header it saw and refuses a response below the highest
// seen before its request was sent. Every KV request of the backend is
// linearizable (a Txn, or a Range without WithSerializable), so in one
// healthy cluster each answer's revision is at least that of every answer
// received before its request left; answers to concurrent requests may
// arrive in any order. Watch and lease responses are not checked: a watch
// may report a follower's older revision.
type revisionKV struct {
	pb.KVClient
	highest *atomic.Int64
}

func (k revisionKV) Range(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	floor := k.highest.Load()
	resp, err := k.KVClient.Range(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return resp, k.observe(floor, resp.GetHeader())
}

func (k revisionKV) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	floor := k.highest.Load()
	resp, err := k.KVClient.Txn(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	// The caller classifies this error as it does any other after sending:
	// a mutating Txn's outcome is then unknown.
	return resp, k.observe(floor, resp.GetHeader())
}

// observe returns an error wrapping ErrRevisionRegressed when h's revision
// is below floor, the highest seen before the request was sent; otherwise
// it raises the highest seen to h's.
func (k revisionKV) observe(floor int64, h *pb.ResponseHeader) error {
	rev := h.GetRevision()
	if rev < floor {
		return fmt.Errorf("%w: an answer at revision %d after one at %d", ErrRevisionRegressed, rev, floor)
	}
	for {
		seen := k.highest.Load()
		if rev <= seen || k.highest.CompareAndSwap(seen, rev) {
			return nil
		}
	}
}
