package memorybackend_test

// Benchmarks of the sharded backend against a baseline: the "seed" design,
// one sync.Mutex over one map, with the same semantics. Both run through
// the backend.Backend interface on the system clock, with lease IDs made
// before the timer starts, so the figures are the backends' own cost.
//
// Every benchmark uses b.RunParallel: with -cpu 1 that is one goroutine
// (the single-goroutine figure), with -cpu N it is N goroutines. Disjoint
// means each goroutine cycles over 64 keys of its own; HotKey means all
// goroutines use one key. See docs/memory-bench.md for figures. The
// Coordinator path, on a fake clock, is measured by BenchmarkConformance.
//
//	go test ./memorybackend/ -run '^$' -bench . -benchmem -cpu 1,2 -count 3

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
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

// impls are the backends compared, in the order they are reported.
var benchImpls = []struct {
	name string
	new  func() backend.Backend
}{
	{"Sharded", func() backend.Backend { return memorybackend.New() }},
	{"Seed", func() backend.Backend { return newSeedBackend() }},
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

// seedBackend is the baseline: the in-memory backend as first designed,
// one mutex over one map. It keeps the same contract as the sharded
// backend (it passes the same checks below) so that the benchmarks compare
// only the locking.
type seedBackend struct {
	mu     sync.Mutex
	keys   map[string]*seedRecord
	closed bool
}

type seedRecord struct {
	token     uint64
	leaseID   string
	ttl       time.Duration
	margin    time.Duration
	expiresAt time.Time
	released  bool
}

func newSeedBackend() *seedBackend {
	return &seedBackend{keys: make(map[string]*seedRecord)}
}

func (r *seedRecord) live(now time.Time) bool { return !r.released && now.Before(r.expiresAt) }

func (r *seedRecord) lease(key string) backend.Lease {
	return backend.Lease{Key: key, LeaseID: r.leaseID, Token: r.token, TTL: r.ttl, Margin: r.margin, ExpiresAt: r.expiresAt}
}

func (s *seedBackend) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed {
		return backend.ErrClosed
	}
	return nil
}

func (s *seedBackend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	now := time.Now()
	r := s.keys[req.Key]
	if r != nil {
		if r.leaseID == req.LeaseID {
			switch {
			case r.live(now):
				return r.lease(req.Key), nil
			case r.released:
				return backend.Lease{}, fmt.Errorf("%w: lease was granted and then released", backend.ErrLeaseNotFound)
			default:
				return backend.Lease{}, fmt.Errorf("%w: lease was granted and has expired", backend.ErrLeaseExpired)
			}
		}
		if r.live(now) {
			return backend.Lease{}, fmt.Errorf("%w: key %q", backend.ErrLeaseHeld, req.Key)
		}
	} else {
		r = &seedRecord{}
		s.keys[req.Key] = r
	}
	*r = seedRecord{token: r.token + 1, leaseID: req.LeaseID, ttl: req.Timeout, margin: req.Margin, expiresAt: now.Add(req.Timeout + req.Margin)}
	return r.lease(req.Key), nil
}

func (s *seedBackend) holder(key, leaseID string, now time.Time) (*seedRecord, error) {
	r := s.keys[key]
	if r == nil || r.leaseID != leaseID || r.released {
		return nil, fmt.Errorf("%w: key %q", backend.ErrLeaseNotFound, key)
	}
	if !r.live(now) {
		return nil, fmt.Errorf("%w: key %q", backend.ErrLeaseExpired, key)
	}
	return r, nil
}

func (s *seedBackend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	now := time.Now()
	r, err := s.holder(req.Key, req.LeaseID, now)
	if err != nil {
		return backend.Lease{}, err
	}
	r.ttl, r.margin, r.expiresAt = req.Timeout, req.Margin, now.Add(req.Timeout+req.Margin)
	return r.lease(req.Key), nil
}

func (s *seedBackend) Release(ctx context.Context, key, leaseID string) error {
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(ctx); err != nil {
		return err
	}
	if r := s.keys[key]; r != nil && r.leaseID == leaseID && r.released {
		return nil
	}
	r, err := s.holder(key, leaseID, time.Now())
	if err != nil {
		return err
	}
	r.released = true
	return nil
}

func (s *seedBackend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := backend.CheckKey(key); err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(ctx); err != nil {
		return 0, false, err
	}
	if r := s.keys[key]; r != nil && r.live(time.Now()) {
		return r.token, true, nil
	}
	return 0, false, nil
}

func (s *seedBackend) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// TestSeedBackendBaseline checks that the baseline behaves like the real
// backend on the operations the benchmarks use, so the comparison is fair.
func TestSeedBackendBaseline(t *testing.T) {
	ctx := context.Background()
	for _, impl := range benchImpls {
		t.Run(impl.name, func(t *testing.T) {
			be := impl.new()
			defer be.Close()
			if l := mustGrant(t, be, "k", "a"); l.Token != 1 {
				t.Fatalf("token %d, want 1", l.Token)
			}
			if _, err := be.Grant(ctx, benchRequest("k", "b")); !errors.Is(err, backend.ErrLeaseHeld) {
				t.Fatalf("second grant: %v, want ErrLeaseHeld", err)
			}
			if _, err := be.Renew(ctx, benchRequest("k", "a")); err != nil {
				t.Fatalf("renew: %v", err)
			}
			if tok, live, err := be.Token(ctx, "k"); err != nil || !live || tok != 1 {
				t.Fatalf("Token = %d, %v, %v", tok, live, err)
			}
			mustRelease(t, be, "k", "a")
			if err := be.Release(ctx, "k", "a"); err != nil {
				t.Fatalf("re-release: %v", err)
			}
			if _, err := be.Grant(ctx, benchRequest("k", "a")); !errors.Is(err, backend.ErrLeaseNotFound) {
				t.Fatalf("grant retry after release: %v, want ErrLeaseNotFound", err)
			}
			if l := mustGrant(t, be, "k", "b"); l.Token != 2 {
				t.Fatalf("token %d, want 2", l.Token)
			}
		})
	}
}
