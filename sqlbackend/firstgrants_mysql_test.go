package sqlbackend_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// First grants of many new keys at once all go through on MySQL. Each
// takes a gap lock (its SELECT ... FOR UPDATE finds no row) and then
// inserts into the gap, which the others' gap locks block: InnoDB breaks
// the cycles by rolling transactions back (1213) and the backend runs them
// again, but retried as they were, the same cycles form again. 100 at once
// (the processes of docs/scale.md's curve starting up) all timed out.
func TestMySQLConcurrentFirstGrants(t *testing.T) {
	_, h := newMySQL(t)
	ctx := context.Background()
	be, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := be.(*sqlbackend.Backend)
	defer b.Close()
	const n = 100
	h.db.SetMaxOpenConns(n)
	h.db.SetMaxIdleConns(n)
	// The bound is the Coordinator's default request timeout: what a
	// caller would wait before it gave up.
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = b.Grant(gctx, backend.Request{Key: fmt.Sprintf("new/%03d", i), LeaseID: "id", Timeout: time.Minute})
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			if failed == 0 {
				t.Errorf("first failure: %v", err)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d concurrent first grants failed", failed, n)
	}
	t.Logf("%d concurrent first grants took %v", n, time.Since(start).Round(time.Millisecond))
}
