package memorybackend_test

// Benchmarks of the backend's own cost, for profiling: through the
// backend.Backend interface on the system clock, with lease IDs made before
// the timer starts. The comparison with the original design, at the
// Coordinator as users call it, is bench's TestReport (docs/benchmarks.md).
//
// Every benchmark uses b.RunParallel: with -cpu 1 that is one goroutine,
// with -cpu N it is N goroutines. Disjoint means each goroutine cycles over
// 64 keys of its own; HotKey means all goroutines use one key.
//
//	go test ./memorybackend/ -run '^$' -bench . -benchmem -cpu 1,2

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

const (
	benchKeysPerGoroutine = 64
	benchTimeout          = time.Hour // never expires during a run
)

// benchImpls are the backends benchmarked: the default (retention on, 24
// hours) and one that keeps every record, run in turn within each -count
// round so that a comparison of the two is interleaved (docs/retention.md).
var benchImpls = []struct {
	name string
	new  func() backend.Backend
}{
	{"Sharded", func() backend.Backend { return memorybackend.New() }},
	{"NoRetention", func() backend.Backend { return memorybackend.New(memorybackend.WithRetention(0)) }},
}

// benchKeys holds each goroutine's keys and lease IDs, built before the
// timer starts. Goroutines pick a set with next.
type benchKeys struct {
	sets [][]string // goroutine -> keys
	ids  [][2]string
	n    atomic.Int64
}

func newBenchKeys(prefix string) *benchKeys {
	g := runtime.GOMAXPROCS(0)
	k := &benchKeys{sets: make([][]string, g), ids: make([][2]string, g)}
	for i := range g {
		k.sets[i] = make([]string, benchKeysPerGoroutine)
		for j := range k.sets[i] {
			k.sets[i][j] = fmt.Sprintf("%s/g%d/k%d", prefix, i, j)
		}
		k.ids[i] = [2]string{fmt.Sprintf("g%d-lease-a", i), fmt.Sprintf("g%d-lease-b", i)}
	}
	return k
}

// grantAll grants every key, each under its goroutine's first lease ID.
func (k *benchKeys) grantAll(b *testing.B, be backend.Backend) {
	for i, set := range k.sets {
		for _, key := range set {
			mustGrant(b, be, key, k.ids[i][0])
		}
	}
}

// next returns the key set and lease IDs of the calling goroutine.
func (k *benchKeys) next() ([]string, [2]string) {
	i := int(k.n.Add(1)-1) % len(k.sets)
	return k.sets[i], k.ids[i]
}

func benchRequest(key, id string) backend.Request {
	return backend.Request{Key: key, LeaseID: id, Timeout: benchTimeout, Margin: time.Second}
}

// BenchmarkGrantRelease measures a grant followed by a release. On the hot
// key a grant that loses (ErrLeaseHeld) counts as the operation.
func BenchmarkGrantRelease(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run("Disjoint/"+impl.name, func(b *testing.B) {
			be := impl.new()
			defer be.Close()
			keys := newBenchKeys("gr")
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				set, ids := keys.next()
				for i := 0; pb.Next(); i++ {
					key := set[i%len(set)]
					// Consecutive leases on a key alternate IDs: a grant
					// with the key's previous ID would be a retry.
					id := ids[(i/len(set))&1]
					if _, err := be.Grant(ctx, benchRequest(key, id)); err != nil {
						b.Error(err)
						return
					}
					if err := be.Release(ctx, key, id); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	for _, impl := range benchImpls {
		b.Run("HotKey/"+impl.name, func(b *testing.B) {
			be := impl.new()
			defer be.Close()
			keys := newBenchKeys("unused")
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				_, ids := keys.next()
				flip := 0
				for pb.Next() {
					id := ids[flip]
					_, err := be.Grant(ctx, benchRequest("hot", id))
					if errors.Is(err, backend.ErrLeaseHeld) {
						continue
					}
					if err != nil {
						b.Error(err)
						return
					}
					if err := be.Release(ctx, "hot", id); err != nil {
						b.Error(err)
						return
					}
					flip ^= 1
				}
			})
		})
	}
}

// BenchmarkChurn measures a grant and a release on a key never used before,
// one goroutine, with the retention off (every record kept), the default
// (24 hours: no pass is due in a run) and 100 ms, on the system clock: each
// grant then does its step of a pass that reclaims the keys of 100 ms ago.
func BenchmarkChurn(b *testing.B) {
	for _, bc := range []struct {
		name      string
		retention time.Duration
	}{{"Off", 0}, {"Default", memorybackend.DefaultRetention}, {"100ms", 100 * time.Millisecond}} {
		b.Run(bc.name, func(b *testing.B) {
			be := memorybackend.New(memorybackend.WithRetention(bc.retention))
			defer be.Close()
			ctx := context.Background()
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = fmt.Sprintf("orders/%08d", i)
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := be.Grant(ctx, benchRequest(keys[i], "lease")); err != nil {
					b.Fatal(err)
				}
				if err := be.Release(ctx, keys[i], "lease"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenew measures renewing a live lease, on disjoint keys only: the
// hot-key case is left out to keep the whole run under three minutes.
func BenchmarkRenew(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run("Disjoint/"+impl.name, func(b *testing.B) {
			be := impl.new()
			defer be.Close()
			keys := newBenchKeys("renew")
			keys.grantAll(b, be)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				set, ids := keys.next()
				for i := 0; pb.Next(); i++ {
					if _, err := be.Renew(ctx, benchRequest(set[i%len(set)], ids[0])); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCheckToken measures reading a live key's token, what a token
// check costs.
func BenchmarkCheckToken(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run("Disjoint/"+impl.name, func(b *testing.B) {
			be := impl.new()
			defer be.Close()
			keys := newBenchKeys("check")
			keys.grantAll(b, be)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				set, _ := keys.next()
				for i := 0; pb.Next(); i++ {
					if _, live, err := be.Token(ctx, set[i%len(set)]); err != nil || !live {
						b.Errorf("Token = %v, %v", live, err)
						return
					}
				}
			})
		})
	}
	for _, impl := range benchImpls {
		b.Run("HotKey/"+impl.name, func(b *testing.B) {
			be := impl.new()
			defer be.Close()
			mustGrant(b, be, "hot", "hot-lease")
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, live, err := be.Token(ctx, "hot"); err != nil || !live {
						b.Errorf("Token = %v, %v", live, err)
						return
					}
				}
			})
		})
	}
}
