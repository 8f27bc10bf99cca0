// Package memorybackend is an in-process fencing backend: the embedded default
// and the fast path. Its clock is injectable (WithClock, FakeClock), so tests
// of code that holds leases can move time by hand.
//
// State lives in shards chosen by a hash of the key, each with its own mutex,
// so operations on different keys rarely contend. Token checks do not
// allocate.
//
// # Memory
//
// A key's record is never deleted: the highest token must outlive every lease
// on the key, or a later grant could reissue it. So a process that leases an
// unbounded number of distinct keys grows without bound; use a persistent
// backend for that, or keys from a bounded set. What stays is small: a key
// whose lease has ended holds its token, its state, a fingerprint of its last
// lease's ID and a copy of its bytes in a record with no pointers in it (the
// garbage collector does not trace it), plus an index slot: a few dozen
// bytes beyond the key's own bytes (docs/memory.md has the measured figure).
// A live lease holds a further 64 bytes and keeps its lease ID and owner
// strings, until it is released, or until it has expired and the key is next
// touched or a later grant in its shard sweeps it.
//
// The fingerprint is a 64-bit hash of the ended lease's ID, keyed by a seed
// drawn for each Backend. It answers a resent request with that ID as the
// contract says (a grant gets ErrLeaseNotFound after a release and
// ErrLeaseExpired after expiry, a release nil or ErrLeaseExpired). Another
// ID that hashes alike, one chance in 2^64 for a random ID, gets the same
// answers, so a collision can refuse a grant or excuse a release that
// changes nothing; it never grants a lease, extends one or reissues a token.
// A live lease's ID is compared in full.
//
// State is lost when the process exits, so tokens restart at 1: this backend
// fences goroutines and tests within one process, not processes.
package memorybackend

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Backend is the in-memory backend. The zero value is not usable; call New.
type Backend struct {
	clock      Clock     // nil: the system's monotonic clock
	base       time.Time // the clock's reading at New: instants are nanoseconds since then
	maxToken   uint64
	keySeed    maphash.Seed // chooses a key's shard and index slot
	idSeed     maphash.Seed // fingerprints ended leases' IDs
	shardShift uint         // a key's shard is its hash >> shardShift
	closed     atomic.Bool
	shards     []shard
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

// New returns an empty in-memory backend. It has 128 shards per
// runtime.GOMAXPROCS at the time of the call, at most 256: enough that
// goroutines on different keys seldom write to the same shard (each such
// write moves the shard's cache lines between cores), few enough that the
// first allocations of a shard (its index, arena chunk and live lease)
// stay a small part of each key's memory when there are only a thousand
// keys. Its fixed cost is 128 bytes per shard.
func New(opts ...Option) *Backend {
	b := &Backend{maxToken: math.MaxUint64, keySeed: maphash.MakeSeed(), idSeed: maphash.MakeSeed()}
	for _, o := range opts {
		o(b)
	}
	if b.clock == nil {
		b.base = time.Now()
	} else {
		b.base = b.clock.Now()
	}
	n := min(128*runtime.GOMAXPROCS(0), 256)
	shift := bits.Len(uint(n - 1)) // log2 of n rounded up to a power of two
	b.shards = make([]shard, 1<<shift)
	b.shardShift = uint(64 - shift)
	return b
}

// now reads the backend's clock: nanoseconds since New.
func (b *Backend) now() int64 {
	if b.clock == nil {
		return int64(time.Since(b.base)) // the monotonic clock alone
	}
	return int64(b.clock.Now().Sub(b.base))
}

// instant turns a reading of now into a time.
func (b *Backend) instant(ns int64) time.Time { return b.base.Add(time.Duration(ns)) }

// locate returns key's hash and shard.
func (b *Backend) locate(key string) (uint64, *shard) {
	h := maphash.String(b.keySeed, key)
	return h, &b.shards[h>>b.shardShift]
}

func (b *Backend) fingerprint(leaseID string) uint64 { return maphash.String(b.idSeed, leaseID) }

func (b *Backend) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

func (b *Backend) leaseOf(key string, token uint64, l *liveLease) backend.Lease {
	return backend.Lease{Key: key, LeaseID: l.id, Token: token, TTL: l.ttl, Margin: l.margin, ExpiresAt: b.instant(l.expires)}
}

// Grant implements backend.Backend.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	h, s := b.locate(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := b.now()
	ref, found := s.find(h, req.Key)
	var last uint64
	if found {
		r := s.record(ref)
		last = r.token()
		if l := s.lease(r.state()); l != nil {
			if l.id == req.LeaseID { // a retry of the grant that made this lease
				if now < l.expires {
					return b.leaseOf(req.Key, last, l), nil
				}
				return backend.Lease{}, backend.ErrLeaseExpired
			}
			if now < l.expires {
				return backend.Lease{}, &backend.HeldError{Remaining: time.Duration(l.expires - now)}
			}
			s.end(ref, stateExpired, b.idSeed) // reads as before: expired
		} else if r.fingerprint() == b.fingerprint(req.LeaseID) { // a retry, after the lease ended
			if r.state() == stateReleased {
				return backend.Lease{}, backend.ErrLeaseNotFound
			}
			return backend.Lease{}, backend.ErrLeaseExpired
		}
	}
	if last >= b.maxToken {
		return backend.Lease{}, backend.ErrTokenSpaceExhausted
	}
	if !found {
		ref = s.insert(h, req.Key, 0, stateReleased)
	}
	state := s.addLive(liveLease{
		id:      req.LeaseID,
		owner:   req.Owner,
		expires: now + int64(req.Timeout+req.Margin),
		ttl:     req.Timeout,
		margin:  req.Margin,
		ref:     ref,
	}, now, b.idSeed)
	r := s.record(ref)
	r.setToken(last + 1)
	r.setState(state)
	return b.leaseOf(req.Key, last+1, s.lease(state)), nil
}

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	h, s := b.locate(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, found := s.find(h, req.Key)
	if !found {
		return backend.Lease{}, backend.ErrLeaseNotFound
	}
	r := s.record(ref)
	l := s.lease(r.state())
	if l == nil {
		if r.state() == stateExpired && r.fingerprint() == b.fingerprint(req.LeaseID) {
			return backend.Lease{}, backend.ErrLeaseExpired
		}
		return backend.Lease{}, backend.ErrLeaseNotFound
	}
	if l.id != req.LeaseID {
		return backend.Lease{}, backend.ErrLeaseNotFound
	}
	now := b.now()
	if now >= l.expires {
		return backend.Lease{}, backend.ErrLeaseExpired
	}
	l.ttl, l.margin = req.Timeout, req.Margin
	l.expires = now + int64(req.Timeout+req.Margin)
	return b.leaseOf(req.Key, r.token(), l), nil
}

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	h, s := b.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, found := s.find(h, key)
	if !found {
		return backend.ErrLeaseNotFound
	}
	r := s.record(ref)
	l := s.lease(r.state())
	if l == nil {
		if r.fingerprint() != b.fingerprint(leaseID) {
			return backend.ErrLeaseNotFound
		}
		if r.state() == stateReleased {
			return nil // released already: a resent release is harmless
		}
		return backend.ErrLeaseExpired
	}
	if l.id != leaseID {
		return backend.ErrLeaseNotFound
	}
	if b.now() >= l.expires {
		s.end(ref, stateExpired, b.idSeed) // reads as before: expired
		return backend.ErrLeaseExpired
	}
	s.end(ref, stateReleased, b.idSeed)
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
	h, s := b.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref, found := s.find(h, key); found {
		r := s.record(ref)
		if l := s.lease(r.state()); l != nil && b.now() < l.expires {
			return r.token(), true, nil
		}
	}
	return 0, false, nil
}

// Close implements backend.Backend. Later calls return backend.ErrClosed.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}
