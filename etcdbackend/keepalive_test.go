package etcdbackend

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// stuckFirstStream is the client's Lease service, except that the first
// keep-alive stream it opens never carries a request: a stream the server
// stopped answering (as a member without a leader does while it forwards a
// keep-alive).
type stuckFirstStream struct {
	pb.LeaseClient
	opened atomic.Int32
}

func (s *stuckFirstStream) LeaseKeepAlive(ctx context.Context, opts ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	st, err := s.LeaseClient.LeaseKeepAlive(ctx, opts...)
	if s.opened.Add(1) == 1 && err == nil {
		return swallowed{st}, nil
	}
	return st, err
}

type swallowed struct{ pb.Lease_LeaseKeepAliveClient }

func (swallowed) Send(*pb.LeaseKeepAliveRequest) error { return nil }

// TestKeepAliveStuckStream: a keep-alive that gets no reply on the shared
// stream gives the stream up after keepAliveWait and says so (the grant then
// sends its own), and the next keep-alive goes on a new stream.
func TestKeepAliveStuckStream(t *testing.T) {
	cli := etcdtest.Client(t)
	b, err := New(context.Background(), cli, WithPrefix("keeper-test/"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stuck := &stuckFirstStream{LeaseClient: b.keeper.leases}
	b.keeper.leases = stuck
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lg, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := b.keeper.renew(ctx, lg.ID); !errors.Is(err, errNoStream) {
		t.Fatalf("keep-alive on a stuck stream: %v, want errNoStream", err)
	}
	if d := time.Since(start); d < keepAliveWait {
		t.Fatalf("gave the stream up after %v, before keepAliveWait", d)
	}
	ttl, err := b.keeper.renew(ctx, lg.ID)
	if err != nil || ttl != 60 {
		t.Fatalf("keep-alive after the stuck stream: %d, %v; want 60, nil", ttl, err)
	}
	if n := stuck.opened.Load(); n != 2 {
		t.Fatalf("%d keep-alive streams opened, want 2", n)
	}
}
