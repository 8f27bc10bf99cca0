package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// Classification: a request that provably never left the client is "did
// not happen"; one that may have reached the server is "outcome unknown".

// waitNotReady waits until cli's connection has noticed that its server is
// gone, so that a request made now cannot get onto the old connection.
func waitNotReady(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	conn := cli.ActiveConnection()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatal("the client's connection still reads ready 10s after its server stopped")
		}
	}
}

// wantNotSent checks that err is a failure that did not happen: not
// ErrOutcomeUnknown, the cause kept.
func wantNotSent(t *testing.T, what string, err, cause error) {
	t.Helper()
	if err == nil || errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, cause) {
		t.Fatalf("%s: %v; want an error wrapping %v and not ErrOutcomeUnknown", what, err, cause)
	}
}

// TestStoppedServerIsNotAmbiguous: with the server down, mutations wait for
// a connection until their deadline and fail as "did not happen", and did
// not happen: after the restart the lease is still there.
func TestStoppedServerIsNotAmbiguous(t *testing.T) {
	m := etcdtest.Start(t, etcdtest.WithFsync())
	cli := etcdtest.NewClient(t, m.Endpoints())
	b, _ := newBackend(t, cli)
	l := mustGrant(t, b, req("k", "A", time.Minute))
	m.Stop()
	waitNotReady(t, cli)

	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	wantNotSent(t, "Release", b.Release(short(), "k", "A"), context.DeadlineExceeded)
	_, err := b.ForceRelease(short(), "k")
	wantNotSent(t, "ForceRelease", err, context.DeadlineExceeded)
	_, err = b.Grant(short(), req("other", "B", time.Minute))
	wantNotSent(t, "Grant", err, context.DeadlineExceeded)

	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	wantToken(t, b, "k", l.Token, true)
}

// TestClosedClientIsNotAmbiguous: a request made on a closed etcd client
// never leaves it, and the backend says so at once with ErrClosed (the etcd
// client itself would resend to its closed connection for seconds). A
// client closed while the request is being made is the Peer check's, as in
// TestStoppedServerIsNotAmbiguous.
func TestClosedClientIsNotAmbiguous(t *testing.T) {
	endpoints := etcdtest.Endpoints(t)
	cli := etcdtest.NewClient(t, endpoints)
	b, prefix := newBackend(t, cli)
	mustGrant(t, b, req("k", "A", time.Minute))
	cli.Close()
	ctx := context.Background()
	wantNotSent(t, "Release on a closed client", b.Release(ctx, "k", "A"), backend.ErrClosed)
	_, err := b.Renew(ctx, req("k", "A", time.Minute))
	wantNotSent(t, "Renew on a closed client", err, backend.ErrClosed)
	// And it did not happen.
	other := backendOn(t, etcdtest.NewClient(t, endpoints), prefix)
	if _, live, err := other.Token(ctx, "k"); err != nil || !live {
		t.Fatalf("Token after the closed client's release = %v, %v; want live", live, err)
	}
}

// TestUnfinishedHandshakeIsNotAmbiguous: a server that accepts the TCP
// connection but never answers the HTTP/2 handshake gives no usable
// connection, so requests never leave.
func TestUnfinishedHandshakeIsNotAmbiguous(t *testing.T) {
	m := etcdtest.Start(t)
	p := etcdtest.StartProxy(t, m.ClientURL)
	cli, err := clientv3.New(clientv3.Config{Endpoints: p.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	b, _ := newBackend(t, cli) // New checks that etcd answers: it must, here
	// Then every connection is cut, and the new ones stall in the handshake.
	p.SetMode(etcdtest.Pause)
	p.Cut()
	time.Sleep(200 * time.Millisecond) // the client sees its connection closed
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	wantNotSent(t, "Release", b.Release(ctx, "k", "A"), context.DeadlineExceeded)
}

// TestLostReplyIsAmbiguous: a release the server applied but whose reply was
// lost (dropped, or the connection cut mid-call) is ErrOutcomeUnknown, and
// resending it settles it.
func TestLostReplyIsAmbiguous(t *testing.T) {
	m := etcdtest.Start(t)
	direct := etcdtest.NewClient(t, m.Endpoints())
	p := etcdtest.StartProxy(t, m.ClientURL)
	cli := etcdtest.NewClient(t, p.Endpoints())
	b, prefix := newBackend(t, cli)
	truth := backendOn(t, direct, prefix)
	ctx := context.Background()

	for i, cut := range []bool{false, true} {
		id := fmt.Sprint("A", i)
		p.SetMode(etcdtest.Forward)
		mustGrant(t, b, req("k", id, time.Minute))
		p.SetMode(etcdtest.DropReplies)
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		if cut {
			time.AfterFunc(500*time.Millisecond, p.Cut)
		}
		err := b.Release(short, "k", id)
		cancel()
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("release with its reply lost (cut %v): %v, want ErrOutcomeUnknown", cut, err)
		}
		// The server did act: the release happened.
		wantToken(t, truth, "k", 0, false)
		p.Cut()
		p.SetMode(etcdtest.Forward)
		// Resend until the answer is known (the first resends may meet
		// the cut connection).
		err = backend.ErrOutcomeUnknown
		for i := 0; i < 50 && errors.Is(err, backend.ErrOutcomeUnknown); i++ {
			time.Sleep(20 * time.Millisecond)
			err = b.Release(ctx, "k", id)
		}
		if err != nil {
			t.Fatalf("resent release: %v", err)
		}
	}
}

// backendOn returns a backend on cli with the given prefix, closed in
// cleanup.
func backendOn(t testing.TB, cli *clientv3.Client, prefix string) backend.Backend {
	t.Helper()
	b, err := newWithPrefix(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
