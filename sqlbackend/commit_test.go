package sqlbackend_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/sqlfault"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestSQLiteFailedCommitIsUnknown: a COMMIT that reached the file and then
// reported an error (an I/O error on the way back) leaves the grant's
// outcome unknown: the error wraps backend.ErrOutcomeUnknown, and the
// grant did take effect, so a retry with the same lease ID adopts it.
func TestSQLiteFailedCommitIsUnknown(t *testing.T) {
	ctx := context.Background()
	var fail atomic.Bool
	errIO := errors.New("disk I/O error (sqlfault)")
	db := sqlfault.Open(t, "sqlite", sqliteDSN(filepath.Join(t.TempDir(), "fencing.db")), func(query string, err error) error {
		if query == "COMMIT" && err == nil && fail.CompareAndSwap(true, false) {
			return errIO
		}
		return err
	})
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	req := backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute}
	fail.Store(true)
	_, err = b.Grant(ctx, req)
	for e := err; e != nil; e = errors.Unwrap(e) {
		t.Logf("%T %v", e, errors.Is(e, context.DeadlineExceeded))
	}
	if fail.Load() || !errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, errIO) {
		t.Fatalf("Grant whose COMMIT failed (the failure injected: %v) = %v; want ErrOutcomeUnknown wrapping the COMMIT's error", !fail.Load(), err)
	}
	l, err := b.Grant(ctx, req)
	if err != nil || l.Token != 1 {
		t.Fatalf("the retry with the same lease ID = %+v, %v; want the committed lease, token 1, adopted", l, err)
	}
}

// TestSQLiteBeginThatRanButFailed: modernc's driver can report a context's
// end for a BEGIN IMMEDIATE that did begin (the statement finished as the
// context ended). The connection is then inside a transaction: put back in
// the pool, every later operation on it would fail with "cannot start a
// transaction within a transaction". It must be discarded.
func TestSQLiteBeginThatRanButFailed(t *testing.T) {
	ctx := context.Background()
	var fail atomic.Bool
	db := sqlfault.Open(t, "sqlite", sqliteDSN(filepath.Join(t.TempDir(), "fencing.db")), func(query string, err error) error {
		if query == "BEGIN IMMEDIATE" && err == nil && fail.CompareAndSwap(true, false) {
			return context.Canceled
		}
		return err
	})
	db.SetMaxOpenConns(1) // the connection that began is the one the next call gets
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute}); !errors.Is(err, context.Canceled) || fail.Load() {
		t.Fatalf("Grant whose BEGIN reported a canceled context (injected: %v) = %v; want that error", !fail.Load(), err)
	}
	l, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "b", Timeout: time.Minute})
	if err != nil || l.Token != 1 {
		t.Fatalf("the next Grant = %+v, %v; want token 1 on a connection in no transaction", l, err)
	}
}

// pastDeadline is a context whose deadline has passed but which has not
// ended: the moment between a socket's own timeout, which the net package
// sets from the deadline, and the context's timer ending it.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestNotSentAtDeadline: a statement not sent because its connection's
// dial hit the context's deadline, before the context's timer ended the
// context, fails with an error wrapping context.DeadlineExceeded, so that
// Lock gives up with its context. The socket's own timeout
// (os.ErrDeadlineExceeded, "i/o timeout") is not context.DeadlineExceeded:
// CI saw LockMany return it on a loaded host.
func TestNotSentAtDeadline(t *testing.T) {
	b := newSQLiteBackend(t)
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	err := b.Classify(pastDeadline{context.Background()}, "grant", dial)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a dial timed out at the deadline: %v; want it to wrap context.DeadlineExceeded and the dial's error", err)
	}
	if err := b.Classify(context.Background(), "grant", dial); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a dial timed out with no deadline: %v; want it not to wrap context.DeadlineExceeded", err)
	}
}
