package sqlbackend_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestPostgresResetAfterSend: the connection is reset after the grant was
// sent (the server's reply meets a TCP RST, as when a middlebox or the
// peer's kernel drops the connection). The error is a network error, not a
// context's, and wraps ErrOutcomeUnknown; the grant happened; the resend
// with the same lease ID returns the same lease.
func TestPostgresResetAfterSend(t *testing.T) {
	srv := pgtest.Start(t)
	p := faultproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", srv.Port()), faultproxy.Hooks{})
	proxied, err := sqlOpenPgx(fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()
	proxied.SetMaxOpenConns(1) // prepared by the warm-up: one round trip per operation
	ctx := context.Background()
	b, err := sqlbackend.New(context.Background(), proxied, sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	direct, _ := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	defer direct.Close()
	if _, err := b.Grant(ctx, backend.Request{Key: "warm-up", LeaseID: "w", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}

	req := backend.Request{Key: "k", LeaseID: "reset", Timeout: time.Minute}
	p.SetMode(faultproxy.ResetReplies)
	_, err = b.Grant(ctx, req)
	p.SetMode(faultproxy.Forward)
	if !errors.Is(err, syscall.ECONNRESET) || !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant whose connection was reset after sending: %v; want a connection reset wrapped in ErrOutcomeUnknown", err)
	}
	tok, live, err := direct.Token(ctx, "k")
	if err != nil || !live {
		t.Fatalf("Token on the server after the reset: %d, %v, %v; want the grant applied", tok, live, err)
	}
	again, err := b.Grant(ctx, req)
	if err != nil || again.Token != tok || again.LeaseID != req.LeaseID {
		t.Fatalf("resent Grant = %+v, %v; want the same lease, token %d", again, err, tok)
	}
}
