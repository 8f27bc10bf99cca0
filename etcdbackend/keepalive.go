package etcdbackend

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// keeper sends the keep-alives that renew pooled etcd leases (see pool.go)
// on one gRPC stream, opened when first needed and again after it breaks,
// instead of a stream per keep-alive: a new stream costs about as much as a
// Txn, a keep-alive on an open one a fifth of that. Replies carry the lease
// ID, and the pool hands a lease to one grant at a time, so each reply has
// one waiter. The stream lives until Close.
type keeper struct {
	leases pb.LeaseClient
	ctx    context.Context // the backend's, with WithRequireLeader: Close ends the stream

	mu     sync.Mutex
	cur    *keepStream // nil until needed, and after it broke
	closed bool
	recv   sync.WaitGroup // the receiving goroutine of each stream
}

type keepStream struct {
	s       pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc       // ends s
	waiting map[int64]chan keepReply // guarded by keeper.mu
}

type keepReply struct {
	ttl int64
	err error
}

// errNoStream means the shared stream could not carry a keep-alive: the
// caller sends it on a stream of its own.
var errNoStream = errors.New("etcdbackend: keep-alive stream unavailable")

// renew renews etcd lease id once on the shared stream and returns its TTL,
// or rpctypes.ErrLeaseNotFound if it has run out or is gone. errNoStream
// means the keep-alive may not have reached etcd and nothing is known.
func (k *keeper) renew(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	ka, err := k.send(id)
	if err != nil {
		return 0, err
	}
	return k.wait(ctx, ka)
}

// keepAlive is a keep-alive sent on the shared stream, its reply not yet
// read: wait reads it.
type keepAlive struct {
	ks *keepStream
	id clientv3.LeaseID
	ch chan keepReply
}

// send sends a keep-alive of etcd lease id on the shared stream without
// waiting for the reply. errNoStream means it was not sent.
func (k *keeper) send(id clientv3.LeaseID) (*keepAlive, error) {
	ch := make(chan keepReply, 1)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, errNoStream
	}
	if k.cur == nil {
		// Fail at once rather than wait for a connection under the lock:
		// then the caller waits on a stream of its own, under its context.
		sctx, cancel := context.WithCancel(k.ctx)
		s, err := k.leases.LeaseKeepAlive(sctx, grpc.WaitForReady(false))
		if err != nil {
			cancel()
			return nil, errNoStream
		}
		k.cur = &keepStream{s: s, cancel: cancel, waiting: make(map[int64]chan keepReply)}
		k.recv.Add(1)
		go k.receive(k.cur)
	}
	ks := k.cur
	if _, busy := ks.waiting[int64(id)]; busy {
		return nil, errNoStream // cannot happen: the pool hands a lease out once
	}
	ks.waiting[int64(id)] = ch
	// A failed Send means the stream broke: its receiver then tells every
	// waiter, this one too.
	_ = ks.s.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	return &keepAlive{ks: ks, id: id, ch: ch}, nil
}

// keepAliveWait is how long a keep-alive waits for its reply on the shared
// stream (a healthy one answers in well under a millisecond) before the
// stream is given up as stuck: etcd answers a stream's keep-alives one at a
// time, and one that a member without a leader forwards can wait for seconds.
const keepAliveWait = 500 * time.Millisecond

// wait returns the reply to ka, as renew does.
func (k *keeper) wait(ctx context.Context, ka *keepAlive) (int64, error) {
	ks, id, ch := ka.ks, ka.id, ka.ch
	timer := time.NewTimer(keepAliveWait)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.ttl, r.err
	case <-timer.C:
		// Start a new stream for the next keep-alives; ending this one
		// tells its waiters (this one too) to send on their own.
		k.mu.Lock()
		if k.cur == ks {
			k.cur = nil
		}
		k.mu.Unlock()
		ks.cancel()
		r := <-ch
		return r.ttl, r.err
	case <-ctx.Done():
		k.mu.Lock()
		if ks.waiting[int64(id)] == ch {
			delete(ks.waiting, int64(id))
		}
		k.mu.Unlock()
		return 0, ctx.Err()
	}
}

// receive hands each reply on ks to its waiter until the stream breaks, then
// tells the remaining waiters to send their keep-alives on their own.
func (k *keeper) receive(ks *keepStream) {
	defer k.recv.Done()
	defer ks.cancel()
	for {
		resp, err := ks.s.Recv()
		k.mu.Lock()
		if err != nil {
			if k.cur == ks {
				k.cur = nil
			}
			for id, ch := range ks.waiting {
				ch <- keepReply{err: errNoStream}
				delete(ks.waiting, id)
			}
			k.mu.Unlock()
			return
		}
		if ch, ok := ks.waiting[resp.ID]; ok {
			delete(ks.waiting, resp.ID)
			r := keepReply{ttl: resp.TTL}
			if resp.TTL <= 0 {
				r.err = rpctypes.ErrLeaseNotFound
			}
			ch <- r
		}
		k.mu.Unlock()
	}
}

// close stops new streams and waits for the current one's receiver, once
// the backend's context, which ends the stream, is cancelled.
func (k *keeper) close() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
	k.recv.Wait()
}

// keepAliveOnce renews etcd leases once each, as clientv3.Lease.KeepAliveOnce
// does, on one stream: it sends them all, in the order given (etcd handles a
// stream's keep-alives one at a time, in order), then reads the answers, and
// returns the TTL the last one got. It reports whether the requests may
// have reached the server: not when the keep-alive stream could not be
// opened. A lease that has run out or is gone gets rpctypes.ErrLeaseNotFound
// (the others may have been renewed).
func (b *Backend) keepAliveOnce(ctx context.Context, ids ...clientv3.LeaseID) (ttl int64, sent bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.leases.LeaseKeepAlive(ctx, grpc.WaitForReady(true))
	if err != nil {
		return 0, false, clientv3.ContextError(ctx, err)
	}
	for _, id := range ids {
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			return 0, true, clientv3.ContextError(ctx, err)
		}
	}
	gone := false
	for range ids {
		resp, err := stream.Recv()
		if err != nil {
			return 0, true, clientv3.ContextError(ctx, err)
		}
		gone = gone || resp.TTL <= 0
		ttl = resp.TTL
	}
	if gone {
		return 0, true, rpctypes.ErrLeaseNotFound
	}
	return ttl, true, nil
}
