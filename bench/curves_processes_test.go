package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// curvesProcesses measures what CURVES_PROCESSES (default 100) processes
// with a Coordinator each cost the store: each process is stood in for by
// a backend of its own (its own database/sql pool with the defaults, or
// its own Redis or etcd client: what a process would hold), in this
// process. It reads the store's load at rest (after each made one grant
// and release), while each holds a key of its own (renewed), and while
// all but one wait for a key that one holds.
func curvesProcesses(t *testing.T, name string, open func(*testing.T, string) *curveStore) [][]string {
	n := envInt(t, "CURVES_PROCESSES", 100)
	st := open(t, "main")
	rows := [][]string{{"backend", "processes", "phase", "load", "errors", "machine_load"}}
	coords := make([]*fencing.Coordinator, n)
	for i := range coords {
		coords[i] = fencing.New(st.another(t))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var errs []string
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	}
	record := func(phase string) {
		time.Sleep(2 * time.Second)
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		load := st.load(lctx)
		lcancel()
		mu.Lock()
		ne := len(errs)
		first := ""
		if ne > 0 {
			first = errs[0]
		}
		mu.Unlock()
		t.Logf("%s, %d processes, %s: %s; %d errors %s; load %s", name, n, phase, load, ne, first, loadAvg())
		rows = append(rows, []string{name, strconv.Itoa(n), phase, load, strconv.Itoa(ne), loadAvg()})
	}

	var wg sync.WaitGroup
	for i, c := range coords {
		wg.Go(func() {
			key := fmt.Sprintf("curves/process/%d", i)
			l, err := c.Grant(ctx, key, curveTTL)
			if err != nil {
				fail(err)
				return
			}
			if err := c.Release(ctx, key, l.ID); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	record("at rest")

	helds := make([]*fencing.Held, n)
	for i, c := range coords {
		wg.Go(func() {
			h, err := c.Hold(ctx, fmt.Sprintf("curves/process/%d", i), 5*time.Second)
			if err != nil {
				fail(err)
				return
			}
			helds[i] = h
		})
	}
	wg.Wait()
	time.Sleep(5 * time.Second) // a renewal each
	record("each holding a key (TTL 5 s, renewed)")
	for _, h := range helds {
		if h != nil {
			wg.Go(func() {
				if err := h.Release(ctx); err != nil {
					fail(err)
				}
			})
		}
	}
	wg.Wait()

	hot := "curves/process/hot"
	holder, err := coords[0].Hold(ctx, hot, 5*time.Second)
	if err != nil {
		t.Fatalf("hold the hot key: %v", err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	for _, c := range coords[1:] {
		wg.Go(func() {
			h, err := c.Lock(wctx, hot, 5*time.Second)
			if err != nil {
				if wctx.Err() == nil {
					fail(err)
				}
				return
			}
			_ = h.Release(ctx)
		})
	}
	time.Sleep(3 * time.Second)
	record(fmt.Sprintf("%d waiting for a key one holds", n-1))
	wcancel()
	wg.Wait()
	if err := holder.Release(ctx); err != nil {
		t.Errorf("release the hot key: %v", err)
	}
	return rows
}
