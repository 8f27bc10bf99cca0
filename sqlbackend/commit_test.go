package sqlbackend_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/sqlfault"
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
	b, err := sqlbackend.New(db, sqlbackend.SQLite)
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
	if fail.Load() || !errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, errIO) {
		t.Fatalf("Grant whose COMMIT failed (the failure injected: %v) = %v; want ErrOutcomeUnknown wrapping the COMMIT's error", !fail.Load(), err)
	}
	l, err := b.Grant(ctx, req)
	if err != nil || l.Token != 1 {
		t.Fatalf("the retry with the same lease ID = %+v, %v; want the committed lease, token 1, adopted", l, err)
	}
}
