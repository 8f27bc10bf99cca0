package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/semaphore"
)

// DefaultReaders is how many readers may be inside at once unless
// WithReaders says otherwise.
const DefaultReaders = 8

// MaxReaders is the largest WithReaders: a writer takes every reader slot
// in one grant (fencing.Coordinator.LockMany), of at most backend.MaxKeys
// keys.
const MaxReaders = backend.MaxKeys

// RWLock is a read-write lock on a Coordinator (see the package
// documentation). It is safe for concurrent use; separate RWLock values on
// one name, in one process or several, are one lock.
type RWLock struct {
	c       *fencing.Coordinator
	name    string
	readers int
	slots   *semaphore.Semaphore
	keys    []string // the reader slots' keys
	// noLine is set once the backend refused fencing.WithFIFO (no
	// backend.Queuer): the turnstile is then taken without it.
	noLine atomic.Bool
}

// Option configures an RWLock.
type Option func(*RWLock)

// WithReaders sets how many readers may be inside at once (default
// DefaultReaders, at most MaxReaders): the number of reader slots. Every
// RWLock on one name must use the same number: a writer waits only for the
// slots it knows of.
func WithReaders(n int) Option { return func(l *RWLock) { l.readers = n } }

// New returns the read-write lock named name on c. Its keys (see the
// package documentation) must be valid keys: the error wraps
// fencing.ErrInvalidKey otherwise, and fencing.ErrInvalidOption for a
// WithReaders below 1 or above MaxReaders.
func New(c *fencing.Coordinator, name string, opts ...Option) (*RWLock, error) {
	l := &RWLock{c: c, name: name, readers: DefaultReaders}
	for _, o := range opts {
		o(l)
	}
	if l.readers < 1 || l.readers > MaxReaders {
		return nil, fmt.Errorf("rwlock %s: %w: WithReaders(%d) is not in [1, %d]", backend.QuoteKey(name), fencing.ErrInvalidOption, l.readers, MaxReaders)
	}
	if err := backend.CheckKey(name); err != nil {
		return nil, fmt.Errorf("rwlock %s: %w", backend.QuoteKey(name), err)
	}
	s, err := semaphore.New(c, name+"/r", l.readers)
	if err != nil {
		return nil, fmt.Errorf("rwlock %s: %w", backend.QuoteKey(name), err)
	}
	l.slots = s
	for i := range l.readers {
		l.keys = append(l.keys, semaphore.SlotKey(s.Name(), i))
	}
	return l, nil
}

// Name returns the lock's name: the key of its turnstile, whose tokens
// are its holders' tokens.
func (l *RWLock) Name() string { return l.name }

// RLock waits until the lock can be read (no writer inside or ahead in
// line, and a reader slot free), then holds it for reading until Release,
// renewing its lease in the background. ctx bounds both the wait and the
// hold, as for fencing.Coordinator.Lock. opts are Lock's: they apply to
// the turnstile and to the reader slot (semaphore.Semaphore.Acquire), so
// fencing.WithWaitTimeout bounds each of the two waits. fencing.WithFIFO
// is always on the turnstile (see the package documentation for backends
// without a line).
func (l *RWLock) RLock(ctx context.Context, ttl time.Duration, opts ...fencing.LockOption) (*Reader, error) {
	for {
		r, err := l.rlock(ctx, ttl, opts)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, errTurnstileLost) || ctx.Err() != nil {
			return nil, l.error("read lock", err)
		}
	}
}

// rlock is one pass of RLock: the turnstile, then a slot.
func (l *RWLock) rlock(ctx context.Context, ttl time.Duration, opts []fencing.LockOption) (*Reader, error) {
	t, err := l.turnstile(ctx, ttl, opts)
	if err != nil {
		return nil, err
	}
	slot, err := l.slots.Acquire(ctx, ttl, opts...)
	if err == nil {
		err = l.stillHeld(t, slot)
	}
	// The turnstile is the next holder's now: a reader slot is taken or
	// the wait is over. A failed release is the turnstile's lease having
	// ended, which stillHeld has judged: it expires anyway.
	_ = t.Release(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	r := &Reader{slot: slot, token: t.Token()}
	r.ctx = guard.ContextWithToken(slot.Context(), l.name, r.token)
	return r, nil
}

// errTurnstileLost is a pass's error when the turnstile's lease ended while
// it waited for the reader slots: RLock and Lock then wait in line again.
var errTurnstileLost = fmt.Errorf("the turnstile's lease ended while waiting for the reader slots: %w", fencing.ErrLeaseLost)

// stillHeld returns nil if the turnstile t was still held when the slots
// (a *fencing.Held or *fencing.HeldMany) were granted, and otherwise
// releases them and returns an error wrapping errTurnstileLost and the
// turnstile's cause. A holder that lost the turnstile may have been
// overtaken in line: entering then would break the order of tokens. t's Deadline, on this process's
// clock, ends before the store can give the turnstile to anyone else, so
// t live now means t was ours when the slots were granted.
func (l *RWLock) stillHeld(t *fencing.Held, slots interface{ Release(context.Context) error }) error {
	if t.Context().Err() == nil {
		return nil
	}
	_ = slots.Release(context.Background()) // best effort: they expire anyway
	return fmt.Errorf("%w (%w)", errTurnstileLost, context.Cause(t.Context()))
}

// Lock waits until the lock can be written (every holder ahead in line
// has passed and every reader inside has left), then holds it for writing
// until Release, renewing its leases in the background. ctx bounds both
// the wait and the hold, as for fencing.Coordinator.Lock. opts are Lock's:
// they apply to the turnstile and to the reader slots (LockMany), so
// fencing.WithWaitTimeout bounds each of the two waits. fencing.WithFIFO
// is always on the turnstile.
func (l *RWLock) Lock(ctx context.Context, ttl time.Duration, opts ...fencing.LockOption) (*Writer, error) {
	for {
		w, err := l.lock(ctx, ttl, opts)
		if err == nil {
			return w, nil
		}
		if !errors.Is(err, errTurnstileLost) || ctx.Err() != nil {
			return nil, l.error("write lock", err)
		}
	}
}

// lock is one pass of Lock: the turnstile, then every slot.
func (l *RWLock) lock(ctx context.Context, ttl time.Duration, opts []fencing.LockOption) (*Writer, error) {
	t, err := l.turnstile(ctx, ttl, opts)
	if err != nil {
		return nil, err
	}
	slots, err := l.c.LockMany(ctx, l.keys, ttl, opts...)
	if err != nil {
		return nil, errors.Join(err, t.Release(context.WithoutCancel(ctx)))
	}
	if err := l.stillHeld(t, slots); err != nil {
		_ = t.Release(context.WithoutCancel(ctx)) // lost: this only stops its Held
		return nil, err
	}
	return newWriter(t, slots), nil
}

// turnstile passes into the turnstile's line and holds the turnstile.
func (l *RWLock) turnstile(ctx context.Context, ttl time.Duration, opts []fencing.LockOption) (*fencing.Held, error) {
	if !l.noLine.Load() {
		h, err := l.c.Lock(ctx, l.name, ttl, append(opts[:len(opts):len(opts)], fencing.WithFIFO())...)
		if err == nil || !errors.Is(err, errors.ErrUnsupported) || ctx.Err() != nil {
			return h, err
		}
		l.noLine.Store(true)
	}
	return l.c.Lock(ctx, l.name, ttl, opts...)
}

func (l *RWLock) error(op string, err error) error {
	return fmt.Errorf("rwlock %s: %s: %w", backend.QuoteKey(l.name), op, err)
}

// Reader holds an RWLock for reading: a lease on one reader slot.
type Reader struct {
	slot  *fencing.Held
	token uint64
	ctx   context.Context
}

// Token returns the reader's fencing token: the turnstile token it passed
// with (see the package documentation for what it orders).
func (r *Reader) Token() uint64 { return r.token }

// Slot returns the reader slot's lease as of its latest confirmed grant or
// renewal. Its Token is the slot's, not the reader's.
func (r *Reader) Slot() fencing.Lease { return r.slot.Lease() }

// Context returns a context that ends when the reader's lease does (see
// fencing.Held.Context). It carries the lock's name and the reader's
// token (guard.TokenFromContext).
func (r *Reader) Context() context.Context { return r.ctx }

// Done is Context().Done().
func (r *Reader) Done() <-chan struct{} { return r.ctx.Done() }

// Err returns nil while the reader is inside and after its Release; an
// error wrapping fencing.ErrLeaseLost after its lease was lost; and the
// parent context's cause when that ended first (see fencing.Held.Err).
func (r *Reader) Err() error { return r.slot.Err() }

// Release stops the renewal and releases the reader slot, as
// fencing.Held.Release does.
func (r *Reader) Release(ctx context.Context) error { return r.slot.Release(ctx) }

// Writer holds an RWLock for writing: the turnstile and every reader slot.
type Writer struct {
	t     *fencing.Held
	slots *fencing.HeldMany
	ctx   context.Context
	// cancel ends ctx; stop stops the AfterFunc that calls look when the
	// slots' context ends.
	cancel context.CancelCauseFunc
	stop   func() bool
}

// newWriter returns the Writer of t and slots: its context ends when
// either ends.
func newWriter(t *fencing.Held, slots *fencing.HeldMany) *Writer {
	w := &Writer{t: t, slots: slots}
	ctx, cancel := context.WithCancelCause(t.Context())
	w.cancel = cancel
	w.stop = context.AfterFunc(slots.Context(), w.look)
	w.ctx = writerContext{ctx, w}
	return w
}

// look asks the leases' contexts, which end a lease whose Deadline has
// passed (see fencing.Held.Context), and ends the writer's context with the
// slots' cause when theirs has ended. The turnstile's ends it by itself
// (its parent).
func (w *Writer) look() {
	_ = w.t.Context().Err()
	if sc := w.slots.Context(); sc.Err() != nil {
		w.cancel(context.Cause(sc))
	}
}

// writerContext is a Writer's context. Its Err and Done first look at the
// leases' contexts, so a lease whose Deadline has passed ends the writer's
// context too, even before the expiry timer runs.
type writerContext struct {
	context.Context
	w *Writer
}

// Err is the embedded context's, once the leases were looked at.
func (c writerContext) Err() error {
	c.w.look()
	return c.Context.Err()
}

// Done is the embedded context's, once the leases were looked at.
func (c writerContext) Done() <-chan struct{} {
	c.w.look()
	return c.Context.Done()
}

// Token returns the writer's fencing token: the turnstile's token, above
// every earlier holder's on the lock.
func (w *Writer) Token() uint64 { return w.t.Token() }

// Leases returns the writer's leases as of their latest confirmed grant or
// renewal: the turnstile's (whose Token is the writer's), then the reader
// slots' in slot order. A supervisor that must stop work before the
// writer's hold ends watches the earliest Deadline among them.
func (w *Writer) Leases() []fencing.Lease {
	return append([]fencing.Lease{w.t.Lease()}, w.slots.Leases()...)
}

// Context returns a context that ends when any of the writer's leases
// does. Its cause (context.Cause) says why, as a fencing.Held's does. It
// carries the lock's name and the writer's token (guard.TokenFromContext).
func (w *Writer) Context() context.Context { return w.ctx }

// Done is Context().Done().
func (w *Writer) Done() <-chan struct{} { return w.ctx.Done() }

// Err returns nil while the writer holds every lease and after its
// Release when it held them until then; the first loss's error (wrapping
// fencing.ErrLeaseLost) after one; and the parent context's cause when
// that ended first.
func (w *Writer) Err() error {
	if err := w.t.Err(); err != nil {
		return err
	}
	return w.slots.Err()
}

// Release stops the renewals and releases the reader slots, then the
// turnstile. It returns nil when the writer held every lease until now,
// else the errors of both releases (see fencing.Held.Release). Calling it
// again returns the same result.
func (w *Writer) Release(ctx context.Context) error {
	w.stop()
	return errors.Join(w.slots.Release(ctx), w.t.Release(ctx))
}
