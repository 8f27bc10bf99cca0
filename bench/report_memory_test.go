package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// memoryTTL is long enough that no lease expires during the report.
const memoryTTL = time.Hour

// memorySection compares the in-memory backend, called through
// fencing.Coordinator as users call it, with the original single-mutex
// design (see original), each at its user-facing call, then times the Lock
// handoff (see memoryHandoff).
func memorySection(t *testing.T, r *report) {
	ctx := context.Background()

	// Memory first, on a heap that holds nothing else of the report's.
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		r.memory = append(r.memory, memoryPerKey(t, n))
	}

	for _, g := range []int{1, 2, 32} {
		coord := fencing.New(memorybackend.New())
		orig := newOriginal()
		sets := disjointKeys(g, 64)
		c := &comparison{
			store: "memory", op: "Grant+Release, disjoint keys", goroutines: g,
			contenders: []contender{
				{name: "ours", worker: func(w int) func(int) error {
					keys := sets[w]
					return func(i int) error {
						key := keys[i%len(keys)]
						l, err := coord.Grant(ctx, key, memoryTTL)
						if err != nil {
							return err
						}
						return coord.Release(ctx, key, l.ID)
					}
				}},
				{name: "original", worker: func(w int) func(int) error {
					keys := sets[w]
					return func(i int) error {
						key := keys[i%len(keys)]
						l, err := orig.Grant(ctx, key, memoryTTL)
						if err != nil {
							return err
						}
						return orig.Release(ctx, key, l.ID)
					}
				}},
			},
		}
		r.compare(t, c)
	}

	r.compare(t, randomKeysComparison(t, ctx, 1_000_000))

	coord := fencing.New(memorybackend.New())
	orig := newOriginal()
	const key = "orders/checked"
	ours, err := coord.Grant(ctx, key, memoryTTL)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := orig.Grant(ctx, key, memoryTTL)
	if err != nil {
		t.Fatal(err)
	}
	r.compare(t, &comparison{
		store: "memory", op: "CheckToken, held key", goroutines: 1,
		contenders: []contender{
			{name: "ours", worker: func(int) func(int) error {
				return func(int) error {
					if ok, err := coord.CheckToken(ctx, key, ours.Token); err != nil || !ok {
						return fmt.Errorf("CheckToken = %v, %v", ok, err)
					}
					return nil
				}
			}},
			{name: "original", worker: func(int) func(int) error {
				return func(int) error {
					if ok, err := orig.CheckToken(ctx, key, theirs.Token); err != nil || !ok {
						return fmt.Errorf("CheckToken = %v, %v", ok, err)
					}
					return nil
				}
			}},
		},
	})

	r.notes = append(r.notes, memoryHandoff(t, 10*r.rounds))
}

// memoryHandoff times rounds handoffs on the in-memory backend, shuffled
// each round with two floors taken after the same pause, and returns them
// as a Markdown table of medians:
//
//   - handoff: a waiting Coordinator.Lock (woken by the holder's Release
//     through backend.Notifier, then one grant), from the Release's call to
//     the Lock returning;
//   - grant+release: one Grant and Release, cold after the pause;
//   - wake: a goroutine parked on a channel, from the send to its running.
func memoryHandoff(t *testing.T, rounds int) string {
	ctx := context.Background()
	coord := fencing.New(memorybackend.New())
	const key = "orders/handoff"
	type locked struct {
		at  time.Time
		h   *fencing.Held
		err error
	}
	ops := []handoffOp{
		{"handoff", func() (time.Duration, error) {
			l, err := coord.Grant(ctx, key, memoryTTL)
			if err != nil {
				return 0, err
			}
			got := make(chan locked, 1)
			go func() {
				h, err := coord.Lock(ctx, key, memoryTTL)
				got <- locked{time.Now(), h, err}
			}()
			time.Sleep(waiterSettle)
			releasing := time.Now()
			if err := coord.Release(ctx, key, l.ID); err != nil {
				return 0, err
			}
			r := <-got
			if r.err != nil {
				return 0, r.err
			}
			return r.at.Sub(releasing), r.h.Release(ctx)
		}},
		{"grant+release", func() (time.Duration, error) {
			time.Sleep(waiterSettle)
			start := time.Now()
			l, err := coord.Grant(ctx, key, memoryTTL)
			if err != nil {
				return 0, err
			}
			err = coord.Release(ctx, key, l.ID)
			return time.Since(start), err
		}},
		{"wake", func() (time.Duration, error) {
			ch, woke := make(chan struct{}), make(chan time.Time)
			go func() {
				<-ch
				woke <- time.Now()
			}()
			time.Sleep(waiterSettle)
			sent := time.Now()
			ch <- struct{}{}
			return (<-woke).Sub(sent), nil
		}},
	}
	m := handoffMedians(t, ops, countdown(rounds))
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nLock handoff in memory, %d shuffled rounds (%v pause before each), medians:\n\n", rounds, waiterSettle)
	sb.WriteString("| round | µs | in cold grant+releases |\n|---|---:|---:|\n")
	for _, op := range ops {
		fmt.Fprintf(&sb, "| %s | %.1f | %.2f |\n", op.name, m[op.name], m[op.name]/m["grant+release"])
	}
	return sb.String()
}

// disjointKeys returns g sets of n keys each, no key in two sets.
func disjointKeys(g, n int) [][]string {
	sets := make([][]string, g)
	for w := range sets {
		sets[w] = make([]string, n)
		for i := range sets[w] {
			sets[w][i] = fmt.Sprintf("orders/w%02d/%04d", w, i)
		}
	}
	return sets
}

// randomKeysComparison makes both stores hold n keys whose leases have
// ended, then grants and releases keys drawn at random among them.
func randomKeysComparison(t *testing.T, ctx context.Context, n int) *comparison {
	coord := fencing.New(memorybackend.New())
	orig := newOriginal()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("orders/%08d", i)
		l, err := coord.Grant(ctx, keys[i], memoryTTL)
		if err == nil {
			err = coord.Release(ctx, keys[i], l.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		ol, err := orig.Grant(ctx, keys[i], memoryTTL)
		if err == nil {
			err = orig.Release(ctx, keys[i], ol.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// One random sequence, walked by each contender from where its last
	// batch stopped.
	seq := make([]int32, 1<<20)
	for i := range seq {
		seq[i] = int32(rand.IntN(n))
	}
	var oursAt, origAt int
	return &comparison{
		store: "memory", op: fmt.Sprintf("Grant+Release, random keys among %.0e", float64(n)), goroutines: 1,
		contenders: []contender{
			{name: "ours", worker: func(int) func(int) error {
				return func(int) error {
					key := keys[seq[oursAt&(len(seq)-1)]]
					oursAt++
					l, err := coord.Grant(ctx, key, memoryTTL)
					if err != nil {
						return err
					}
					return coord.Release(ctx, key, l.ID)
				}
			}},
			{name: "original", worker: func(int) func(int) error {
				return func(int) error {
					key := keys[seq[origAt&(len(seq)-1)]]
					origAt++
					l, err := orig.Grant(ctx, key, memoryTTL)
					if err != nil {
						return err
					}
					return orig.Release(ctx, key, l.ID)
				}
			}},
		},
	}
}

// memoryPerKey measures the heap that n keys whose leases have ended hold
// in each store: HeapAlloc after a GC, after minus before granting and
// releasing every key once, divided by n. The store itself is made before
// the first reading (its fixed cost is not per key). Each key is a fresh
// string that the caller drops, as a process that keeps only the store
// would: a store that keeps the caller's string holds its bytes as much as
// one that copies them.
func memoryPerKey(t *testing.T, n int) memoryRow {
	ctx := context.Background()
	row := memoryRow{store: "memory", keys: n, keyLen: len(memoryKey(0))}
	measure := func(name string, grantRelease func(key string) error) {
		h0 := heapAlloc()
		for i := range n {
			if err := grantRelease(memoryKey(i)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		row.perKey = append(row.perKey, namedValue{name, float64(heapAlloc()-h0) / float64(n)})
	}

	coord := fencing.New(memorybackend.New())
	measure("ours", func(key string) error {
		l, err := coord.Grant(ctx, key, memoryTTL)
		if err != nil {
			return err
		}
		return coord.Release(ctx, key, l.ID)
	})
	runtime.KeepAlive(coord)
	coord = nil

	orig := newOriginal()
	measure("original", func(key string) error {
		l, err := orig.Grant(ctx, key, memoryTTL)
		if err != nil {
			return err
		}
		return orig.Release(ctx, key, l.ID)
	})
	runtime.KeepAlive(orig)
	return row
}

// memoryKey is the i-th key of memoryPerKey: 15 bytes, a fresh string.
func memoryKey(i int) string { return fmt.Sprintf("orders/%08d", i) }

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
