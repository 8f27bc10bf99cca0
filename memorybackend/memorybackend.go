// Package memorybackend is an in-process fencing backend: the embedded default
// and the fast path. Its clock is injectable (WithClock, FakeClock), so tests
// of code that holds leases can move time by hand.
//
// State lives in a fixed set of shards chosen by a hash of the key, each with
// its own mutex, so operations on different keys rarely contend. Token checks
// do not allocate.
//
// # Memory
//
// A key's record is never deleted: the highest token must outlive every lease
// on the key, or a later grant could reissue it. Each key that was ever
// leased holds one record of about 100 bytes plus the key's bytes and the
// last lease ID (26 bytes from package fencing). A process that leases an
// unbounded number of distinct keys grows without bound; use a persistent
// backend for that, or keys from a bounded set.
//
// State is lost when the process exits, so tokens restart at 1: this backend
// fences goroutines and tests within one process, not processes.
package memorybackend

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing/backend"
)

const shardCount = 256 // a power of two

// Backend is the in-memory backend. The zero value is not usable; call New.
type Backend struct {
	clock    Clock
	maxToken uint64
	seed     maphash.Seed
	closed   atomic.Bool
	shards   [shardCount]shard
}

type shard struct {
	mu   sync.Mutex
	keys map[string]*record
	subs map[string]map[*subscription]struct{} // NotifyFree waiters; nil until the first
	_    [40]byte                              // keep neighbouring shards' locks off one cache line
}

// record is a key's state. It stays after its lease ends: token is the
// highest token ever minted for the key.
type record struct {
	token     uint64
	leaseID   string // most recent lease's ID
	ttl       time.Duration
	margin    time.Duration
	expiresAt time.Time
	released  bool
}

func (r *record) live(now time.Time) bool {
	return !r.released && now.Before(r.expiresAt)
}

func (r *record) lease(key string) backend.Lease {
	return backend.Lease{Key: key, LeaseID: r.leaseID, Token: r.token, TTL: r.ttl, Margin: r.margin, ExpiresAt: r.expiresAt}
}

// Option configures a Backend.
type Option func(*Backend)

// WithClock makes the backend read c instead of the system clock. Should c
// ever go backwards, the backend holds time at the latest reading until c
// catches up, so nothing that expired comes back.
func WithClock(c Clock) Option {
	return func(b *Backend) { b.clock = &monotonic{c: c} }
}

// WithMaxToken caps the tokens the backend mints (default math.MaxUint64);
// past it Grant fails with ErrTokenSpaceExhausted. It exists so that code
// above a backend can test how it handles exhaustion.
func WithMaxToken(max uint64) Option {
	return func(b *Backend) { b.maxToken = max }
}

// New returns an empty in-memory backend.
func New(opts ...Option) *Backend {
	b := &Backend{clock: systemClock{base: time.Now()}, maxToken: math.MaxUint64, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(b)
	}
	for i := range b.shards {
		b.shards[i].keys = make(map[string]*record)
	}
	return b
}

func (b *Backend) shard(key string) *shard {
	return &b.shards[maphash.String(b.seed, key)&(shardCount-1)]
}

func (b *Backend) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// Grant implements backend.Backend.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	s := b.shard(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := b.clock.Now()
	r := s.keys[req.Key]
	if r != nil {
		if r.leaseID == req.LeaseID { // a retry of the grant that made this lease
			switch {
			case r.live(now):
				return r.lease(req.Key), nil
			case r.released:
				return backend.Lease{}, backend.ErrLeaseNotFound
			default:
				return backend.Lease{}, backend.ErrLeaseExpired
			}
		}
		if r.live(now) {
			return backend.Lease{}, &backend.HeldError{Remaining: r.expiresAt.Sub(now)}
		}
	}
	var last uint64
	if r != nil {
		last = r.token
	}
	if last >= b.maxToken {
		return backend.Lease{}, backend.ErrTokenSpaceExhausted
	}
	if r == nil {
		r = &record{}
		s.keys[req.Key] = r
	}
	*r = record{
		token:     last + 1,
		leaseID:   req.LeaseID,
		ttl:       req.Timeout,
		margin:    req.Margin,
		expiresAt: now.Add(req.Timeout + req.Margin),
	}
	return r.lease(req.Key), nil
}

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	s := b.shard(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := b.clock.Now()
	r, err := holderRecord(s, req.Key, req.LeaseID, now)
	if err != nil {
		return backend.Lease{}, err
	}
	r.ttl, r.margin = req.Timeout, req.Margin
	r.expiresAt = now.Add(req.Timeout + req.Margin)
	return r.lease(req.Key), nil
}

// holderRecord returns key's record when leaseID holds its live lease, and
// otherwise the error that Renew and Release report.
func holderRecord(s *shard, key, leaseID string, now time.Time) (*record, error) {
	r := s.keys[key]
	if r == nil || r.leaseID != leaseID || r.released {
		return nil, backend.ErrLeaseNotFound
	}
	if !r.live(now) {
		return nil, backend.ErrLeaseExpired
	}
	return r, nil
}

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	s := b.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.keys[key]; r != nil && r.leaseID == leaseID && r.released {
		return nil // released already: a resent release is harmless
	}
	r, err := holderRecord(s, key, leaseID, b.clock.Now())
	if err != nil {
		return err
	}
	r.released = true
	s.notify(key)
	return nil
}

// Token implements backend.Backend. It does not allocate.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx); err != nil {
		return 0, false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return 0, false, err
	}
	s := b.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.keys[key]; r != nil && r.live(b.clock.Now()) {
		return r.token, true, nil
	}
	return 0, false, nil
}

// Close implements backend.Backend. Later calls return backend.ErrClosed.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}
