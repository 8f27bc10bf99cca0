package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// fullBackend is every capability a Coordinator looks for that the four
// store backends share; countingBackend keeps them all, since a wrapper
// without one would measure another Lock (polling instead of a watch, no
// line).
type fullBackend interface {
	backend.Backend
	backend.Notifier
	backend.Inspector
	backend.ForceReleaser
	backend.Lister
	backend.Queuer
	backend.LineReader
	backend.MultiGranter
	backend.Sizer
}

// requestCounts counts the calls a Coordinator makes through the backend
// SPI, by method: each is one request to the store (Redis pipelines several
// into one round trip, etcd's Grant sends more than one RPC; the counts are
// the library's requests, not the wire's).
type requestCounts struct {
	mu sync.Mutex
	n  map[string]*atomic.Int64
}

func (c *requestCounts) add(method string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]*atomic.Int64{}
	}
	v := c.n[method]
	if v == nil {
		v = new(atomic.Int64)
		c.n[method] = v
	}
	c.mu.Unlock()
	v.Add(1)
}

// snapshot returns the counts so far.
func (c *requestCounts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		m[k] = v.Load()
	}
	return m
}

// diff returns b - a, by method, and the total of the requests a
// Coordinator makes on behalf of its callers (Size, polled for metrics,
// left out).
func diffCounts(a, b map[string]int64) (map[string]int64, int64) {
	d := map[string]int64{}
	var total int64
	for k, v := range b {
		if n := v - a[k]; n != 0 {
			d[k] = n
			if k != "Size" {
				total += n
			}
		}
	}
	return d, total
}

// formatCounts prints counts per handoff, the largest first.
func formatCounts(d map[string]int64, per int) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(d[b] - d[a]) })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(d[k])/float64(max(per, 1))))
	}
	return strings.Join(parts, ", ")
}

// counted counts the SPI calls every backend here has (countedCore) in c.
type counted struct {
	b countedCore
	c *requestCounts
}

// countedCore is what fullBackend and observedBackend share.
type countedCore interface {
	backend.Backend
	backend.Notifier
	backend.Inspector
	backend.ForceReleaser
	backend.Lister
	backend.Sizer
}

// countingBackend is a backend that counts every SPI call in c.
type countingBackend struct {
	counted
	full fullBackend
}

// countRequests returns b with its SPI calls counted in c. It panics on a
// backend without every capability of fullBackend or of observedBackend.
func countRequests(b backend.Backend, c *requestCounts) backend.Backend {
	if o, ok := b.(observedBackend); ok {
		return countingObserved{counted{o, c}}
	}
	f := b.(fullBackend)
	return countingBackend{counted{f, c}, f}
}

// observedBackend is kubebackend's capabilities: observed expiry, no line
// of waiters, no atomic grant of several keys.
type observedBackend interface {
	backend.Backend
	backend.ObservedExpiry
	backend.Notifier
	backend.Inspector
	backend.ForceReleaser
	backend.Lister
	backend.Sizer
}

// countingObserved is countingBackend for an observedBackend, which it
// stays (the Coordinator reads the ObservedExpiry marker).
type countingObserved struct{ counted }

// ObservedExpiry implements backend.ObservedExpiry.
func (countingObserved) ObservedExpiry() {}

func (w counted) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	w.c.add("Grant")
	return w.b.Grant(ctx, req)
}

func (w counted) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	w.c.add("Renew")
	return w.b.Renew(ctx, req)
}

func (w counted) Release(ctx context.Context, key, leaseID string) error {
	w.c.add("Release")
	return w.b.Release(ctx, key, leaseID)
}

func (w counted) Token(ctx context.Context, key string) (uint64, bool, error) {
	w.c.add("Token")
	return w.b.Token(ctx, key)
}

func (w counted) Close() error { return w.b.Close() }

func (w counted) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	w.c.add("NotifyFree")
	return w.b.NotifyFree(ctx, key)
}

func (w counted) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	w.c.add("Inspect")
	return w.b.Inspect(ctx, key)
}

func (w counted) ForceRelease(ctx context.Context, key string) (bool, error) {
	w.c.add("ForceRelease")
	return w.b.ForceRelease(ctx, key)
}

func (w counted) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	w.c.add("List")
	return w.b.List(ctx, prefix, cursor, limit)
}

func (w countingBackend) Enqueue(ctx context.Context, key, waiterID string, ttl time.Duration) (backend.Place, error) {
	w.c.add("Enqueue")
	return w.full.Enqueue(ctx, key, waiterID, ttl)
}

func (w countingBackend) Dequeue(ctx context.Context, key, waiterID string) error {
	w.c.add("Dequeue")
	return w.full.Dequeue(ctx, key, waiterID)
}

func (w countingBackend) NotifyTurn(ctx context.Context, key, waiterID string) (backend.Subscription, error) {
	w.c.add("NotifyTurn")
	return w.full.NotifyTurn(ctx, key, waiterID)
}

func (w countingBackend) LineLength(ctx context.Context, key string) (int, error) {
	w.c.add("LineLength")
	return w.full.LineLength(ctx, key)
}

func (w countingBackend) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	w.c.add("GrantMany")
	return w.full.GrantMany(ctx, reqs)
}

func (w counted) Size(ctx context.Context) (backend.StoreSize, error) {
	w.c.add("Size")
	return w.b.Size(ctx)
}

var (
	_ fullBackend     = countingBackend{}
	_ observedBackend = countingObserved{}
)
