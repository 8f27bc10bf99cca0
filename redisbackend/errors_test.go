package redisbackend_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// wantClassified checks the rule of sendError on an error from a failed
// call: a request that never left (a dial error, a closed client, a pool
// timeout) and a request the server refused (an error reply) do not wrap
// ErrOutcomeUnknown; every other failure does.
func wantClassified(t *testing.T, what string, err error) {
	t.Helper()
	var op *net.OpError
	var rerr redis.Error
	definite := errors.As(err, &op) && op.Op == "dial" ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.As(err, &rerr)
	if definite == errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("%s: %v; want ErrOutcomeUnknown exactly when the request may have been sent", what, err)
	}
}

// wantNotSent fails unless err is a failure that did not wrap
// ErrOutcomeUnknown and matches target.
func wantNotSent(t *testing.T, what string, err, target error) {
	t.Helper()
	if err == nil || errors.Is(err, backend.ErrOutcomeUnknown) || (target != nil && !errors.Is(err, target)) {
		t.Fatalf("%s: %v; want a definite error (%v), not ErrOutcomeUnknown", what, err, target)
	}
}

// TestKilledServerIsNotSent: once the server is gone, a grant's dial is
// refused, and the error says the request never left: the caller knows
// nothing happened. go-redis's default MaxRetries is on.
func TestKilledServerIsNotSent(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client() // default options: MaxRetries 3
	b := newBackend(t, client)
	ctx := context.Background()
	mustGrant(t, b, "k", "lease-1") // a pooled connection to the server
	srv.Kill()
	_, err := b.Grant(ctx, req("other", "lease-2"))
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("Grant on a killed server: %v, want a dial error", err)
	}
	wantNotSent(t, "Grant on a killed server", err, nil)
	wantNotSent(t, "Release on a killed server", b.Release(ctx, "k", "lease-1"), nil)
	_, err = b.Renew(ctx, req("k", "lease-1"))
	wantNotSent(t, "Renew on a killed server", err, nil)
}

// TestClosedClientIsNotSent: a closed client sends nothing.
func TestClosedClientIsNotSent(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b := newBackend(t, client)
	mustGrant(t, b, "k", "lease-1")
	client.Close()
	_, err := b.Grant(context.Background(), req("other", "lease-2"))
	wantNotSent(t, "Grant on a closed client", err, redis.ErrClosed)
	if got := counter(t, srv.Client(), b, "other"); got != "" {
		t.Fatalf("counter %q after a grant on a closed client", got)
	}
}

// TestPoolTimeoutIsNotSent: a grant that never got a connection from the
// pool was not sent.
func TestPoolTimeoutIsNotSent(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, PoolTimeout: 50 * time.Millisecond})
	defer client.Close()
	b := newBackend(t, client)
	mustGrant(t, b, "warm-up", "w")
	blocked := make(chan error, 1)
	go func() { // holds the only connection for a second
		blocked <- client.BLPop(context.Background(), time.Second, "no-such-list").Err()
	}()
	deadline := time.Now().Add(5 * time.Second)
	for client.PoolStats().IdleConns > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	_, err := b.Grant(context.Background(), req("k", "lease-1"))
	wantNotSent(t, "Grant without a free connection", err, redis.ErrPoolTimeout)
	if err := <-blocked; !errors.Is(err, redis.Nil) {
		t.Fatalf("BLPOP: %v", err)
	}
	if got := counter(t, srv.Client(), b, "k"); got != "" {
		t.Fatalf("counter %q after a grant that timed out in the pool", got)
	}
}

// TestLostReplyThenRefusedDialIsUnknown: the server runs the grant and the
// reply is lost; from then on every dial is refused. Had go-redis resent
// the script (MaxRetries 3), its last error would be the refused dial and
// hide that the first attempt ran: the error must stay ErrOutcomeUnknown.
func TestLostReplyThenRefusedDialIsUnknown(t *testing.T) {
	srv := redistest.Start(t, persistent)
	p := startProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 3})
	defer client.Close()
	b := newBackend(t, client)
	mustGrant(t, b, "warm-up", "w")
	p.refuse.Store(true)
	p.arm(faultDrop)
	_, err := b.Grant(context.Background(), req("k", "lease-1"))
	if !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant whose reply was lost before dials were refused: %v, want ErrOutcomeUnknown", err)
	}
	if got := counter(t, srv.Client(), b, "k"); got != "1" {
		t.Fatalf("counter %q: the server did not run the grant", got)
	}
	// And now a grant is refused at the dial: not sent.
	_, err = b.Grant(context.Background(), req("k2", "lease-2"))
	wantNotSent(t, "Grant with dials refused", err, nil)
}

// TestErrorReplyIsDefinite: a script the server refuses (here WRONGTYPE on
// a record that is not a hash) changed nothing and does not wrap
// ErrOutcomeUnknown.
func TestErrorReplyIsDefinite(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	if err := client.Set(ctx, b.RedisKey("k"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := b.Grant(ctx, req("k", "lease-1"))
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		t.Fatalf("Grant on a string: %v, want the server's error reply", err)
	}
	wantNotSent(t, "Grant on a string", err, nil)
}
