package sqlbackend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestMySQLCrashTokensNeverGoBack: grants run while mariadbd (syncing
// every commit) is killed with SIGKILL and started again; no token is
// reissued.
func TestMySQLCrashTokensNeverGoBack(t *testing.T) {
	srv := mysqltest.StartConfig(t, mysqltest.Config{Durable: true})
	crashTokensNeverGoBack(t, srv.DB(t), sqlbackend.MySQL, srv.Crash, srv.Restart)
}

// TestMySQLLostCommit: the connection is cut once the transaction's
// statement named by cut was sent, before its reply. Cut at COMMIT, the
// error wraps ErrOutcomeUnknown, the grant (or release) happened, and the
// resend with the same lease ID returns the same lease (nil). Cut at the
// UPDATE before it, the error is plain and nothing was applied. A refused
// dial is a plain error.
func TestMySQLLostCommit(t *testing.T) {
	srv := mysqltest.Start(t)
	var cutAt atomic.Value // the statement whose reply is cut; "" for none
	cutAt.Store("")
	var armed atomic.Bool // the statement was sent: cut the next reply
	p := faultproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", srv.Port()), faultproxy.Hooks{
		OnRequest: func(_ *faultproxy.Conn, b []byte) {
			// A COM_QUERY packet: 4 bytes of header, 0x03, the text.
			if s := cutAt.Load().(string); s != "" && len(b) > 5 && b[4] == 0x03 && bytes.HasPrefix(b[5:], []byte(s)) {
				armed.Store(true)
			}
		},
		OnReply: func(*faultproxy.Conn, []byte) faultproxy.Verdict {
			if armed.CompareAndSwap(true, false) {
				cutAt.Store("")
				return faultproxy.Close
			}
			return faultproxy.Carry
		},
	})
	proxied := openMySQL(t, fmt.Sprintf("root@tcp(%s)/%s?interpolateParams=true", p.Addr(), mysqltest.Database))
	ctx := context.Background()
	b, err := sqlbackend.New(context.Background(), proxied, sqlbackend.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	direct, err := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()

	req := backend.Request{Key: "k", LeaseID: "lost", Timeout: time.Minute, Margin: time.Second}
	// The first grant of a key inserts its row; the release updates it.
	if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "first", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	cutAt.Store("UPDATE")
	if err := b.Release(ctx, "k", "first"); err == nil || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Release with its UPDATE's reply cut: %v, want a plain error", err)
	}
	if st, err := direct.Inspect(ctx, "k"); err != nil || !st.Live {
		t.Fatalf("after a release cut before COMMIT: %+v, %v; want the lease still live", st, err)
	}
	if err := b.Release(ctx, "k", "first"); err != nil {
		t.Fatal(err)
	}

	cutAt.Store("COMMIT")
	_, err = b.Grant(ctx, req)
	if !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant with its COMMIT's reply cut: %v, want ErrOutcomeUnknown", err)
	}
	tok, live, err := direct.Token(ctx, "k")
	if err != nil || !live {
		t.Fatalf("Token on the server after the cut: %d, %v, %v; want the grant applied", tok, live, err)
	}
	again, err := b.Grant(ctx, req)
	if err != nil || again.Token != tok || again.LeaseID != req.LeaseID || again.TTL != req.Timeout || again.Margin != req.Margin {
		t.Fatalf("resent Grant = %+v, %v; want the same lease, token %d", again, err, tok)
	}
	cutAt.Store("COMMIT")
	if err := b.Release(ctx, "k", req.LeaseID); !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Release with its COMMIT's reply cut: %v, want ErrOutcomeUnknown", err)
	}
	if err := b.Release(ctx, "k", req.LeaseID); err != nil {
		t.Fatalf("resent Release: %v, want nil", err)
	}
	if _, live, _ := direct.Token(ctx, "k"); live {
		t.Fatal("the key is live after the release")
	}

	// Nothing listens: the statement never left.
	p.Close()
	refused := openMySQL(t, fmt.Sprintf("root@tcp(%s)/%s?timeout=2s", p.Addr(), mysqltest.Database))
	rb, err := sqlbackend.New(context.Background(), refused, sqlbackend.MySQL, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	_, err = rb.Grant(ctx, backend.Request{Key: "k", LeaseID: "never", Timeout: time.Minute})
	if err == nil || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant on a refused dial: %v, want a plain error", err)
	}
}
