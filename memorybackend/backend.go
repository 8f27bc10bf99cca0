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
	lines      lines // the lines of waiters (queue.go)

	retention time.Duration // 0: records are kept for ever
	floor     atomic.Uint64 // the highest token of any key reclaimed (sweep.go)
	sweep     sweeper
}

// DefaultRetention is the retention of a backend made without
// WithRetention.
const DefaultRetention = 24 * time.Hour

// Option configures a Backend.
type Option func(*Backend)

// WithClock makes the backend read c instead of the system clock (nil
// means the system clock). Should c ever go backwards, the backend holds
// time at the latest reading until c catches up, so nothing that expired
// comes back.
func WithClock(c Clock) Option {
	return func(b *Backend) {
		b.clock = nil
		if c != nil {
			b.clock = &monotonic{c: c}
		}
	}
}

// WithRetention sets how long a key's record outlives the key's last use:
// once a key has had no live lease and no lock delay for d on the
// backend's clock, a sweep deletes its record, and the key then reads as
// one never leased, except that its next token is still above every token
// it had (see the package doc's "Retention" and backend's contract). d <= 0
// keeps every record for ever.
//
// The default, DefaultRetention (24 hours), is long enough that no
// realistic pause outlives it (a stalled holder, a request resent after a
// partition: a resend after the retention may get a new lease instead of
// its verdict), and short enough that a workload of a key per job, order or
// file holds a day of keys, not every key it ever used.
func WithRetention(d time.Duration) Option {
	return func(b *Backend) { b.retention = max(d, 0) }
}

// WithMaxToken caps the tokens the backend mints (default math.MaxUint64);
// past it Grant fails with ErrTokenSpaceExhausted. It exists so that code
// above a backend can test how it handles exhaustion.
func WithMaxToken(max uint64) Option {
	return func(b *Backend) { b.maxToken = max }
}

// New returns an empty in-memory backend. Unlike the backends over a store
// outside the process it takes no context and returns no error: it sends
// nothing and no option can be wrong, so it can neither block nor fail
// (see backend's "Constructors and the safety check"). It has 128 shards per
// runtime.GOMAXPROCS at the time of the call, at most 256: enough that
// goroutines on different keys seldom write to the same shard (each such
// write moves the shard's cache lines between cores), few enough that the
// first allocations of a shard (its index, arena chunk and live lease)
// stay a small part of each key's memory when there are only a thousand
// keys. Its fixed cost is 128 bytes per shard.
func New(opts ...Option) *Backend {
	b := &Backend{maxToken: math.MaxUint64, keySeed: maphash.MakeSeed(), idSeed: maphash.MakeSeed(), retention: DefaultRetention}
	for _, o := range opts {
		o(b)
	}
	b.sweep.start(b.retention)
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

// ready opens every operation: it returns ctx's error, then
// backend.ErrClosed after Close, then args: the error of the operation's
// argument check, a backend.Check function called on the operation's
// arguments (nil for an operation with none to check). The backends are
// the one layer that checks arguments (the Coordinator and the conformance
// suite rely on it), and this is where each operation does; a call refused
// here sends and changes nothing.
func (b *Backend) ready(ctx context.Context, args error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return args
}

func (b *Backend) leaseOf(key string, token uint64, l *liveLease) backend.Lease {
	return backend.Lease{Key: key, LeaseID: l.id, Token: token, TTL: l.ttl, Margin: l.margin, ExpiresAt: b.instant(l.expires)}
}

// Close implements backend.Backend. Later calls return backend.ErrClosed.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}

// The optional capabilities of package backend, all implemented here.
var (
	_ backend.Notifier      = (*Backend)(nil)
	_ backend.Inspector     = (*Backend)(nil)
	_ backend.ForceReleaser = (*Backend)(nil)
	_ backend.Lister        = (*Backend)(nil)
	_ backend.InProcess     = (*Backend)(nil)
	_ backend.Queuer        = (*Backend)(nil)
	_ backend.MultiGranter  = (*Backend)(nil)
	_ backend.Sizer         = (*Backend)(nil)
)

// InProcess implements backend.InProcess: no request waits on anything
// outside the process, so package fencing adds no request timeout.
func (b *Backend) InProcess() {}
