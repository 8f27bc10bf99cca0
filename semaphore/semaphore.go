package semaphore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// MaxSize is the largest size a Semaphore may have.
const MaxSize = 1024

// DefaultPollInterval is Acquire's fallback poll: on a backend that can
// notify it only covers a missed notification.
const DefaultPollInterval = time.Second

// Semaphore hands out at most Size permits at once. It is safe for
// concurrent use.
type Semaphore struct {
	c     *fencing.Coordinator
	name  string
	slots []string
	poll  time.Duration

	mu    sync.Mutex
	queue []chan struct{} // waiters in line; the first's channel is closed: its turn
	ws    *waitState      // the subscriptions and expiries the first waiter uses
}

// Option configures a Semaphore.
type Option func(*Semaphore)

// WithPollInterval bounds how long Acquire waits between attempts when
// nothing wakes it (default DefaultPollInterval, or
// fencing.DefaultPollIntervalNoNotify on a backend that cannot notify).
// Values below fencing.MinPollInterval are raised to it.
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
// fencing.Coordinator.Hold does: renewed in the background, its Context
// ending when the permit is lost or ctx ends, released with Held.Release.
// opts are Hold's (WithOwner, WithMargin...): fencing.HoldOption, so the
// options of Lock's wait (fencing.WithFIFO, fencing.WithPollInterval,
// fencing.WithWaitTimeout), which Acquire's own wait does not honour, do
// not compile here; its poll is the Semaphore's WithPollInterval, its bound
// ctx's. The permit's Token is its slot's fencing token; send it with every
// write to the slot's resource.
//
// A store that is away for a while (fencing.IsTransient: a refused dial, a
// reset, a restart) does not end the wait: Acquire tries again after a
// jittered pause of up to a second, and polls when it cannot subscribe.
// A waiter whose ctx ends returns ctx's error (wrapping the store's last
// one too, when the store was away) and leaves nothing behind: a grant
// whose outcome stayed unknown is released first (see Hold).
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...fencing.HoldOption) (*fencing.Held, error) {
	turn := s.enqueue()
	defer s.leave(turn)
	select {
	case <-turn:
	case <-ctx.Done():
		return nil, s.error("acquire", ctx.Err())
	}
	ws, err := s.waitState(ctx)
	if err != nil {
		return nil, s.error("acquire", err)
	}
	due := ws.start()
	var away time.Duration // the pause while the store is away
	lastErr := ws.unsubscribed
	for {
		h, err := s.tryEach(ctx, ttl, opts, ws, due)
		switch {
		case h != nil:
			return h, nil
		case errors.Is(err, fencing.ErrLeaseHeld):
			lastErr, away = nil, 0
			due, err = ws.wait(ctx)
		case ctx.Err() == nil && fencing.IsTransient(err):
			// The store is away for a while: one more reason to wait.
			// Try every slot again after a jittered pause that doubles
			// up to a second.
			lastErr = err
			away = min(max(2*away, fencing.MinPollInterval), time.Second)
			t := time.NewTimer(away/2 + rand.N(away/2+1))
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-t.C:
				err, due = nil, s.shuffled()
			}
			t.Stop()
		}
		if err != nil {
			if lastErr != nil && ctx.Err() != nil {
				err = &awayError{end: ctx.Err(), last: lastErr}
			}
			return nil, s.error("acquire", err)
		}
	}
}

// awayError is Acquire's error when ctx ended while the store was away:
// it wraps ctx's error and the store's last one.
type awayError struct{ end, last error }

func (e *awayError) Error() string {
	return e.end.Error() + " while the store was unavailable: " + e.last.Error()
}

func (e *awayError) Unwrap() []error { return []error{e.end, e.last} }

// TryAcquire takes a free permit if there is one, trying each slot once
// from a random one, and returns an error wrapping fencing.ErrLeaseHeld
// when all are taken. opts are Hold's.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration, opts ...fencing.HoldOption) (*fencing.Held, error) {
	h, err := s.tryEach(ctx, ttl, opts, nil, s.shuffled())
	if err != nil {
		return nil, s.error("try acquire", err)
	}
	return h, nil
}

// tryEach holds the first of the slots order names that it can, noting
// each refusal's time left in ws (when not nil). It returns an error
// wrapping fencing.ErrLeaseHeld when every slot was held.
func (s *Semaphore) tryEach(ctx context.Context, ttl time.Duration, opts []fencing.HoldOption, ws *waitState, order []int) (*fencing.Held, error) {
	for _, i := range order {
		h, err := s.c.Hold(ctx, s.slots[i], ttl, opts...)
		if err == nil {
			if ws != nil {
				ws.until[i] = time.Now().Add(ttl) // ours now
			}
			return h, nil
		}
		var held *backend.HeldError
		var oe *fencing.OutcomeError
		switch {
		case errors.As(err, &held):
			if ws != nil {
				ws.refused(i, held.Remaining)
			}
		case errors.As(err, &oe) && oe.Settled && ctx.Err() == nil:
			// Unknown, and released: nothing is held; try the next slot.
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("all %d permits taken: %w", len(s.slots), fencing.ErrLeaseHeld)
}

// shuffled returns the slots in order from a random one, so that processes
// spread over the slots.
func (s *Semaphore) shuffled() []int {
	n := len(s.slots)
	off := rand.N(n)
	order := make([]int, n)
	for i := range order {
		order[i] = (off + i) % n
	}
	return order
}

func (s *Semaphore) error(op string, err error) error {
	return fmt.Errorf("semaphore %s: %s: %w", backend.QuoteKey(s.name), op, err)
}

// enqueue puts a waiter in line and returns its channel, closed when it is
// its turn.
func (s *Semaphore) enqueue() chan struct{} {
	turn := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, turn)
	if len(s.queue) == 1 {
		close(turn)
	}
	return turn
}

// leave takes a waiter out of line. The first's leaving makes the next
// first; the last's closes the subscriptions.
func (s *Semaphore) leave(turn chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.queue, turn)
	s.queue = slices.Delete(s.queue, i, i+1)
	switch {
	case len(s.queue) == 0:
		if s.ws != nil {
			s.ws.close()
			s.ws = nil
		}
	case i == 0:
		close(s.queue[0])
	}
}

// waitState returns the first waiter's state, subscribing to every slot
// when there is none yet.
func (s *Semaphore) waitState(ctx context.Context) (*waitState, error) {
	s.mu.Lock()
	ws := s.ws
	s.mu.Unlock()
	if ws != nil {
		return ws, nil
	}
	ws = &waitState{s: s, until: make([]time.Time, len(s.slots)), poll: s.poll}
	if ws.poll == 0 {
		ws.poll = DefaultPollInterval
	}
	for _, key := range s.slots {
		sub, err := s.c.NotifyFree(ctx, key)
		if errors.Is(err, errors.ErrUnsupported) {
			ws.close()
			ws.subs = nil
			if s.poll == 0 {
				ws.poll = fencing.DefaultPollIntervalNoNotify
			}
			break
		}
		if err != nil && (ctx.Err() != nil || !fencing.IsTransient(err)) {
			ws.close()
			return nil, err
		}
		if err != nil {
			// The store is away: poll, as on a backend that cannot
			// notify, rather than give up the wait.
			ws.close()
			ws.subs, ws.unsubscribed = nil, err
			ws.poll = min(ws.poll, fencing.DefaultPollIntervalNoNotify)
			break
		}
		ws.subs = append(ws.subs, sub)
	}
	ws.cases = make([]reflect.SelectCase, 2+len(ws.subs))
	for i, sub := range ws.subs {
		ws.cases[2+i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(sub.Freed())}
	}
	ws.fresh = true
	s.mu.Lock()
	s.ws = ws
	s.mu.Unlock()
	return ws, nil
}

// waitState is what the first waiter knows: a subscription per slot and
// when each slot's lease should end. Only the first waiter uses it.
type waitState struct {
	s     *Semaphore
	subs  []fencing.Subscription // one per slot, or none on a backend that cannot notify
	cases []reflect.SelectCase   // ctx, timer, then each subscription's Freed
	until []time.Time            // when each slot's lease should end, as last refused
	poll  time.Duration
	fresh bool // no slot tried yet: try them all
	// unsubscribed is the subscription's error when the store was away:
	// the waiters poll.
	unsubscribed error
}

// start returns the slots a new first waiter tries: all of them (from a
// random one) for a fresh state, else those whose lease should have ended
// by now (none: it waits for a release or an expiry).
func (ws *waitState) start() []int {
	if ws.fresh {
		ws.fresh = false
		return ws.s.shuffled()
	}
	return ws.due()
}

// due returns the slots whose lease should have ended by now, the earliest
// first.
func (ws *waitState) due() []int {
	now := time.Now()
	var due []int
	for i, u := range ws.until {
		if !u.After(now) {
			due = append(due, i)
		}
	}
	slices.SortFunc(due, func(a, b int) int { return ws.until[a].Compare(ws.until[b]) })
	return due
}

// refused notes that slot i's lease has remaining left (zero: unknown).
func (ws *waitState) refused(i int, remaining time.Duration) {
	if remaining <= 0 || remaining > ws.poll {
		remaining = ws.poll
	}
	ws.until[i] = time.Now().Add(remaining + rand.N(min(remaining/10, 10*time.Millisecond)+1))
}

// wait blocks until a slot is announced free, a slot's lease should have
// ended, or the poll interval passes (then every slot is tried), and
// returns the slots to try.
func (ws *waitState) wait(ctx context.Context) ([]int, error) {
	poll := ws.poll
	next := time.Now().Add(poll/2 + rand.N(poll/2+1))
	for _, u := range ws.until {
		if u.Before(next) {
			next = u
		}
	}
	t := time.NewTimer(max(time.Until(next), fencing.MinPollInterval))
	defer t.Stop()
	ws.cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	ws.cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)}
	chosen, _, ok := reflect.Select(ws.cases)
	switch {
	case chosen == 0:
		return nil, ctx.Err()
	case chosen == 1:
		if due := ws.due(); len(due) > 0 {
			return due, nil
		}
		return ws.s.shuffled(), nil // the fallback poll
	case !ok: // a watch broke: poll from now on
		ws.cases[chosen].Chan = reflect.Value{}
		ws.poll = min(ws.poll, fencing.DefaultPollIntervalNoNotify)
		return ws.s.shuffled(), nil
	}
	// Announced releases: the slot that woken us, and any other pending.
	freed := []int{chosen - 2}
	for i := 2; i < len(ws.cases); i++ {
		if i == chosen || !ws.cases[i].Chan.IsValid() {
			continue
		}
		select {
		case _, ok := <-ws.subs[i-2].Freed():
			if ok {
				freed = append(freed, i-2)
			}
		default:
		}
	}
	return freed, nil
}

func (ws *waitState) close() {
	for _, sub := range ws.subs {
		sub.Close()
	}
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
