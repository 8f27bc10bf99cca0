package etcdbackend

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// txnSignal is a KV service that closes sent when the first Txn goes out.
type txnSignal struct {
	pb.KVClient
	sent   chan struct{}
	closed atomic.Bool
}

func (k *txnSignal) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	if k.closed.CompareAndSwap(false, true) {
		close(k.sent)
	}
	return k.KVClient.Txn(ctx, in, opts...)
}

// repliesAfter is a Lease service whose keep-alive streams hand out no reply
// before after is closed, and then replies gone (TTL 0) if gone is set.
type repliesAfter struct {
	pb.LeaseClient
	after  chan struct{}
	gone   bool
	opened atomic.Int32
}

func (l *repliesAfter) LeaseKeepAlive(ctx context.Context, opts ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	l.opened.Add(1)
	s, err := l.LeaseClient.LeaseKeepAlive(ctx, opts...)
	return heldStream{s, l}, err
}

type heldStream struct {
	pb.Lease_LeaseKeepAliveClient
	l *repliesAfter
}

func (s heldStream) Recv() (*pb.LeaseKeepAliveResponse, error) {
	resp, err := s.Lease_LeaseKeepAliveClient.Recv()
	if err == nil {
		select {
		case <-s.l.after:
		case <-s.Context().Done():
			return nil, s.Context().Err()
		}
		if s.l.gone {
			resp.TTL = 0
		}
	}
	return resp, err
}

// pipelineBackend returns a backend whose pool holds the etcd lease of a
// released grant of key "a", whose Txns close the returned channel, and
// whose keep-alives are answered only after that (with gone, as gone).
// The keep-alives of its own streams (keepAliveOnce) are counted by the
// second result.
func pipelineBackend(t *testing.T, gone bool) (*Backend, *repliesAfter, *repliesAfter) {
	cli := etcdtest.Client(t)
	b, err := New(t.Context(), cli, WithPrefix("pipeline-test/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := backend.Request{Key: "a", LeaseID: "A", Timeout: time.Minute}
	if _, err := b.Grant(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "a", "A"); err != nil {
		t.Fatal(err)
	}
	sent := make(chan struct{})
	b.kv = clientv3.NewKVFromKVClient(&txnSignal{KVClient: pb.NewKVClient(cli.ActiveConnection()), sent: sent}, cli)
	shared := &repliesAfter{LeaseClient: b.keeper.leases, after: sent, gone: gone}
	own := &repliesAfter{LeaseClient: b.leases, after: sent, gone: gone}
	b.keeper.leases, b.leases = shared, own
	return b, shared, own
}

// TestGrantKeepAliveWithTxn: a grant that reuses an etcd lease this backend
// set the TTL of moments ago sends its keep-alive and its Txn together: the
// keep-alive is answered only once the Txn went out, and the grant neither
// waits for it first (it would give the shared stream up after
// keepAliveWait and send another on a stream of its own) nor loses the
// renewal (the lease's TTL restarts, and ExpiresAt counts from it).
func TestGrantKeepAliveWithTxn(t *testing.T) {
	b, shared, own := pipelineBackend(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := time.Now()
	l, err := b.Grant(ctx, backend.Request{Key: "b", LeaseID: "B", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n := own.opened.Load(); n != 0 || shared.opened.Load() != 1 {
		t.Fatalf("keep-alive streams: %d shared, %d of its own; want 1 and 0 (sent with the Txn)", shared.opened.Load(), n)
	}
	if l.ExpiresAt.Before(before.Add(time.Minute)) || l.ExpiresAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("ExpiresAt %v, want a minute after the grant's keep-alive (grant began %v)", l.ExpiresAt, before)
	}
	if ids := b.pool.drain(); len(ids) != 0 {
		t.Fatalf("the pool still holds %v after the grant reused its lease", ids)
	}
}

// TestGrantKeepAliveWithTxnFindsLeaseGone: when the keep-alive sent with a
// grant's Txn finds the etcd lease gone after the Txn attached the key, the
// grant's outcome is unknown, and a resend answers it.
func TestGrantKeepAliveWithTxnFindsLeaseGone(t *testing.T) {
	b, _, _ := pipelineBackend(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := backend.Request{Key: "b", LeaseID: "B", Timeout: time.Minute}
	if _, err := b.Grant(ctx, r); !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("grant whose keep-alive found the lease gone: %v, want ErrOutcomeUnknown", err)
	}
	// The lease was not gone (the reply said so): the resend finds the
	// key attached to it, as its Txn left it.
	l, err := b.Grant(ctx, r)
	if err != nil || l.LeaseID != "B" {
		t.Fatalf("resent grant: %+v, %v", l, err)
	}
}
