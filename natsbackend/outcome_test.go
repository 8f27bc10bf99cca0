package natsbackend_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/natsbackend/natstest"
)

// TestLostReplyIsOutcomeUnknown: a grant whose write reached the server but
// whose acknowledgement the network lost (the fault proxy swallows every
// reply once a KV publish is on its way) is ErrOutcomeUnknown, and the
// resend with the same lease ID settles it.
func TestLostReplyIsOutcomeUnknown(t *testing.T) {
	srv := natstest.Shared(t)
	var dropping, stalled atomic.Bool
	proxy := faultproxy.Start(t, strings.TrimPrefix(srv.URL, "nats://"), faultproxy.Hooks{
		OnRequest: func(_ *faultproxy.Conn, b []byte) {
			if dropping.Load() && bytes.Contains(b, []byte("PUB $KV.")) {
				stalled.Store(true) // the write goes out; its acknowledgement is lost
			}
		},
		OnReply: func(*faultproxy.Conn, []byte) faultproxy.Verdict {
			if stalled.Load() {
				return faultproxy.Stall
			}
			return faultproxy.Carry
		},
	})
	nc, err := nats.Connect("nats://"+proxy.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := open(js, natstest.Bucket(t, js))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	req := backend.Request{Key: "lost-reply", LeaseID: "lease-with-a-lost-reply", Timeout: time.Minute, Margin: time.Second}
	// Create the key's entry first, so the grant is one read and one write.
	other := backend.Request{Key: req.Key, LeaseID: "an-earlier-lease", Timeout: time.Minute, Margin: time.Second}
	if _, err := b.Grant(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, other.Key, other.LeaseID); err != nil {
		t.Fatal(err)
	}
	dropping.Store(true)
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = b.Grant(gctx, req)
	cancel()
	dropping.Store(false)
	if !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant whose acknowledgement was lost: %v, want ErrOutcomeUnknown", err)
	}
	stalled.Store(false)
	proxy.Reset() // the client reconnects
	var lease backend.Lease
	for end := time.Now().Add(time.Minute); ; {
		lease, err = b.Grant(ctx, req)
		if err == nil || time.Now().After(end) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("resent Grant: %v", err)
	}
	tok, live, err := b.Token(ctx, req.Key)
	if err != nil || !live || tok != lease.Token {
		t.Fatalf("Token = %d, %v, %v; want the resent grant's %d, live", tok, live, err, lease.Token)
	}
	if _, err := b.Grant(ctx, backend.Request{Key: req.Key, LeaseID: "someone-else", Timeout: time.Minute}); !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("another grant after the settled one: %v, want ErrLeaseHeld", err)
	}
}
