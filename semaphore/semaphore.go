package semaphore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// MaxSize is the largest size a Semaphore may have.
const MaxSize = 1024

// DefaultPollInterval is Acquire's fallback poll: on a backend that can
// notify it only covers a missed notification. It is
// fencing.DefaultPollInterval.
const DefaultPollInterval = time.Second

// Semaphore hands out at most Size permits at once. It is safe for
// concurrent use.
type Semaphore struct {
	c     *fencing.Coordinator
	name  string
	slots []string
	poll  time.Duration
}

// Option configures a Semaphore.
type Option func(*Semaphore)

// WithPollInterval bounds how long Acquire waits between attempts when
// nothing wakes it (default DefaultPollInterval, or
// fencing.DefaultPollIntervalNoNotify on a backend that cannot notify), as
// fencing.WithPollInterval does for Lock; an Acquire's own
// fencing.WithPollInterval overrides it. Values below
// fencing.MinPollInterval are raised to it.
func WithPollInterval(d time.Duration) Option {
	return func(s *Semaphore) { s.poll = max(d, fencing.MinPollInterval) }
}

// New returns the semaphore named name with size permits on c. Its slot
// keys (see the package documentation) must be valid keys: the error wraps
// fencing.ErrInvalidKey otherwise, and fencing.ErrInvalidOption for a size
// below 1 or above MaxSize.
func New(c *fencing.Coordinator, name string, size int, opts ...Option) (*Semaphore, error) {
	if size < 1 || size > MaxSize {
		return nil, fmt.Errorf("semaphore %s: %w: size %d is not in [1, %d]", backend.QuoteKey(name), fencing.ErrInvalidOption, size, MaxSize)
	}
	s := &Semaphore{c: c, name: name, slots: make([]string, size)}
	for i := range s.slots {
		s.slots[i] = SlotKey(name, i)
	}
	if err := backend.CheckKey(s.slots[size-1]); err != nil {
		return nil, fmt.Errorf("semaphore %s: %w", backend.QuoteKey(name), err)
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// SlotKey returns the key of slot i of the semaphore named name.
func SlotKey(name string, i int) string { return name + "/" + strconv.Itoa(i) }

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Size returns the number of permits.
func (s *Semaphore) Size() int { return len(s.slots) }

// Acquire waits for a permit, or until ctx ends, and holds it as
// fencing.Coordinator.Lock does: it is fencing.Coordinator.LockAny over
// the slot keys, so the permit is renewed in the background, its Context
// ends when the permit is lost or ctx ends, and Held.Release frees it.
// opts are Lock's: the held lease's (WithOwner, WithMargin...) and the
// wait's. With fencing.WithFIFO the waiter waits in every slot's line and
// permits go to waiters in the order their waits began (see LockAny); a
// handoff then wakes the one waiter at the head of the slot's line,
// where without it a release wakes every waiter. fencing.WithWaitTimeout
// bounds the wait alone, with an error wrapping fencing.ErrLeaseHeld.
// The permit's Token is its slot's fencing token; send it with every write
// to the slot's resource.
//
// A store that is away for a while (fencing.IsTransient: a refused dial, a
// reset, a restart) does not end the wait, as for Lock. A waiter whose wait
// ends returns the wait's error (wrapping the store's last one too, when
// the store was away) and leaves nothing behind: a grant whose outcome
// stayed unknown is released first.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...fencing.LockOption) (*fencing.Held, error) {
	if s.poll > 0 {
		opts = append([]fencing.LockOption{fencing.WithPollInterval(s.poll)}, opts...)
	}
	h, err := s.c.LockAny(ctx, s.slots, ttl, opts...)
	if err != nil {
		return nil, s.error("acquire", err)
	}
	return h, nil
}

// TryAcquire takes a free permit if there is one, trying each slot once
// from a random one, and returns an error wrapping fencing.ErrLeaseHeld
// when all are taken. opts are Hold's.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration, opts ...fencing.HoldOption) (*fencing.Held, error) {
	n := len(s.slots)
	off := rand.N(n)
	for k := range n {
		h, err := s.c.Hold(ctx, s.slots[(off+k)%n], ttl, opts...)
		if err == nil {
			return h, nil
		}
		var held *backend.HeldError
		var oe *fencing.OutcomeError
		switch {
		case errors.As(err, &held):
		case errors.As(err, &oe) && oe.Settled && ctx.Err() == nil:
			// Unknown, and released: nothing is held; try the next slot.
		default:
			return nil, s.error("try acquire", err)
		}
	}
	return nil, s.error("try acquire", fmt.Errorf("all %d permits taken: %w", n, fencing.ErrLeaseHeld))
}

func (s *Semaphore) error(op string, err error) error {
	return fmt.Errorf("semaphore %s: %s: %w", backend.QuoteKey(s.name), op, err)
}

// Permit is a live permit, as Holders reports it.
type Permit struct {
	// Slot is the permit's slot number; one at or past Size means another
	// process uses this name with a larger size.
	Slot int
	// Key is the slot's key.
	Key string
	// Owner is the holder's owner (fencing.WithOwner), if it gave one.
	Owner string
	// Token is the permit's fencing token.
	Token uint64
	// Remaining is how long the permit had left on the coordinator's clock.
	Remaining time.Duration
	// ExpiresAt is when it ends on the coordinator's clock unless renewed.
	ExpiresAt time.Time
}

// Holders returns the live permits, in slot order. It lists the slot keys
// (one page per 100 keys) on a backend that implements backend.Lister,
// which also shows slots past Size, and inspects each of the Size slots
// otherwise. It is a snapshot: permits come and go as it reads.
func (s *Semaphore) Holders(ctx context.Context) ([]Permit, error) {
	var out []Permit
	add := func(key string, st fencing.KeyState) {
		n, err := strconv.Atoi(strings.TrimPrefix(key, s.name+"/"))
		if err != nil || n < 0 || SlotKey(s.name, n) != key || !st.Live {
			return
		}
		out = append(out, Permit{Slot: n, Key: key, Owner: st.Owner, Token: st.Token, Remaining: st.Remaining, ExpiresAt: st.ExpiresAt})
	}
	cursor := ""
	for {
		page, next, err := s.c.List(ctx, s.name+"/", cursor, 100)
		if errors.Is(err, errors.ErrUnsupported) {
			break
		}
		if err != nil {
			return nil, s.error("holders", err)
		}
		for _, k := range page {
			add(k.Key, k.State)
		}
		if next == "" {
			slices.SortFunc(out, func(a, b Permit) int { return a.Slot - b.Slot })
			return out, nil
		}
		cursor = next
	}
	for _, key := range s.slots {
		st, err := s.c.Inspect(ctx, key)
		if err != nil {
			return nil, s.error("holders", err)
		}
		add(key, st)
	}
	return out, nil
}
