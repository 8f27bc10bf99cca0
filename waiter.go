package fencing

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Lock's pacing. A waiter sends a grant at once when woken by a
// notification, and otherwise never sooner than MinPollInterval after its
// previous attempt.
const (
	// MinPollInterval is the shortest time Lock waits between two grant
	// attempts that no notification prompted.
	MinPollInterval = 10 * time.Millisecond
	// DefaultPollInterval is Lock's fallback poll on a backend that can
	// notify (backend.Notifier): it only covers a missed notification.
	DefaultPollInterval = time.Second
	// DefaultPollIntervalNoNotify is Lock's poll on a backend that cannot
	// notify: it bounds how late a waiter sees a release.
	DefaultPollIntervalNoNotify = 100 * time.Millisecond
)

// pace is the one pacing formula of every wait for a key (a refused grant,
// a head of a line waiting for the key to free up, a waiter in a line): how
// long to sleep before looking again when nothing wakes the waiter. left is
// how long the holder (or the entry ahead in the line) has left, when
// known (> 0): the waiter looks just after it, with a jitter of a tenth of
// it up to 10 ms, so that the waiters of one expiry do not look at one
// instant; otherwise, or when left is longer than poll, after a jittered
// poll (between poll/2 and poll).
func pace(poll, left time.Duration) time.Duration {
	if left > 0 && left < poll {
		return left + rand.N(min(left/10, 10*time.Millisecond)+1)
	}
	return poll/2 + rand.N(poll/2+1)
}

// keySet is one wait's keys (one for Lock, every key of a LockMany or a
// LockAny): a keyWaiter per key, and the one channel that every key's
// release notifications (and, for LockAny with WithFIFO, its arrivals at
// the head of a key's line) reach, so that a wait for any of them is one
// select.
type keySet struct {
	c     *Coordinator
	keys  []keyWaiter // in the order of the call's keys
	poll  time.Duration
	given time.Duration // WithPollInterval's; 0: the default
	last  time.Time     // when the previous grant attempt was let through

	events chan keyEvent
	stop   chan struct{} // closed by close: the forwarders return
	fwd    sync.WaitGroup
	// halt ends the waits in the lines (LockAny with WithFIFO); lines
	// waits for them.
	halt  context.CancelFunc
	lines sync.WaitGroup
}

// keyWaiter is what a wait knows of one of its keys: the release
// notification, when the backend has one, its entry in the key's line
// (WithFIFO), and what the last refusal said.
type keyWaiter struct {
	key     string
	sub     backend.Subscription
	ln      *line              // WithFIFO's entry in the key's line (fifo.go), until a Held has it
	atHead  bool               // LockAny with WithFIFO: the entry reached the head of the line
	until   time.Time          // when to try the key again (pace); zero: at the next poll
	delayed bool               // until is the end of a lock delay: nothing else frees the key
	seen    *backend.HeldError // what awaitFree last saw of a live lease or a lock delay

	unsubscribed error // the subscription's error while the store was away: the waiter polls
}

// keyEvent is what woke a wait: key i's release announced, its watch
// broken, or (LockAny with WithFIFO) the head of its line reached, or the
// wait in its line failed with err.
type keyEvent struct {
	i     int
	broke bool
	head  bool
	err   error
}

func newKeySet(c *Coordinator, keys []string, poll time.Duration) *keySet {
	ks := &keySet{c: c, keys: make([]keyWaiter, len(keys)), given: poll, halt: func() {},
		events: make(chan keyEvent, len(keys)), stop: make(chan struct{})}
	for i, k := range keys {
		ks.keys[i].key = k
	}
	return ks
}

// subscribe sets up key i's notification, when the backend has one. A
// subscription that fails while the store is away (IsTransient) is not a
// reason to stop waiting: the wait polls instead, as on a backend that
// cannot notify, and keeps the error in unsubscribed.
func (ks *keySet) subscribe(ctx context.Context, i int) error {
	w := &ks.keys[i]
	if n, ok := ks.c.backend.(backend.Notifier); ok {
		sub, err := timedAttempt(ks.c, ctx, func(ctx context.Context) (backend.Subscription, error) { return n.NotifyFree(ctx, w.key) })
		switch {
		case err == nil:
			w.sub = sub
			ks.forward(i, sub.Freed())
		case ctx.Err() != nil || !IsTransient(err):
			return err
		default:
			w.unsubscribed = err
		}
	}
	poll := ks.given
	if poll == 0 {
		poll = DefaultPollInterval
		if w.sub == nil {
			poll = DefaultPollIntervalNoNotify
		}
	}
	if w.unsubscribed != nil {
		poll = min(poll, DefaultPollIntervalNoNotify)
	}
	if ks.poll == 0 || poll < ks.poll {
		ks.poll = poll
	}
	ks.last = time.Now()
	return nil
}

// forward passes key i's notifications on to the set's events until close.
func (ks *keySet) forward(i int, freed <-chan struct{}) {
	ks.fwd.Go(func() {
		for {
			select {
			case <-ks.stop:
				return
			case _, ok := <-freed:
				select {
				case ks.events <- keyEvent{i: i, broke: !ok}:
				case <-ks.stop:
					return
				}
				if !ok {
					return
				}
			}
		}
	})
}

// awaitTurns waits in the lines of keys (LockAny with WithFIFO), each
// arrival at a head an event, until halt.
func (ks *keySet) awaitTurns(ctx context.Context, keys []int) {
	ctx, ks.halt = context.WithCancel(ctx)
	for _, i := range keys {
		ln := ks.keys[i].ln
		ks.lines.Go(func() {
			err := ln.waitTurn(ctx)
			select {
			case ks.events <- keyEvent{i: i, head: true, err: err}:
			case <-ctx.Done(): // halted: nobody waits for it
			}
		})
	}
}

// haltTurns ends the waits in the lines and waits for them.
func (ks *keySet) haltTurns() {
	ks.halt()
	ks.lines.Wait()
}

// close ends what the wait started and no Held took over: the waits in the
// lines, the subscriptions, the entries in the lines.
func (ks *keySet) close() {
	ks.halt()
	close(ks.stop)
	ks.lines.Wait()
	ks.fwd.Wait()
	for i := range ks.keys {
		w := &ks.keys[i]
		if w.sub != nil {
			w.sub.Close()
		}
		if w.ln != nil {
			w.ln.leave(nil)
		}
	}
}

// handOff returns key's entry in its line, for the Held that got the key,
// and tells the keeper, which leaves the line at once so that the next
// waiter takes the head. nil without WithFIFO.
func (ks *keySet) handOff(key string) *line {
	for i := range ks.keys {
		if w := &ks.keys[i]; w.key == key && w.ln != nil {
			ln := w.ln
			w.ln = nil
			ln.gotKey()
			return ln
		}
	}
	return nil
}

// refused notes that a grant of key i was refused with held: the key is
// tried again when its holder's lease should have ended (pace), or, during
// a lock delay (held.Delayed, see WithLockDelay), exactly when the delay
// ends, since nothing but time frees the key before then.
func (ks *keySet) refused(i int, held *backend.HeldError) {
	w := &ks.keys[i]
	w.delayed = held.Delayed && held.Remaining > 0
	if w.delayed {
		w.until = time.Now().Add(held.Remaining)
	} else {
		w.until = time.Now().Add(pace(ks.poll, held.Remaining))
	}
}

// wait blocks until one of the keys of watch is announced free (a release,
// or an expiry the store saw), or reaches the head of its line (LockAny
// with WithFIFO, whatever watch), or is due to be tried again (refused; a
// key with nothing known is due at the next poll), and returns the keys
// to try: the announced ones, or the due ones, the earliest first. An
// attempt no notification prompted comes no sooner than MinPollInterval
// after the previous one, except at the end of a lock delay. With no key
// to watch it waits for a head alone.
func (ks *keySet) wait(ctx context.Context, watch []int) ([]int, error) {
	var next time.Time
	exact := false
	now := time.Now()
	for _, i := range watch {
		w := &ks.keys[i]
		if w.until.IsZero() {
			w.until, w.delayed = now.Add(pace(ks.poll, 0)), false
		}
		if next.IsZero() || w.until.Before(next) {
			next, exact = w.until, w.delayed
		}
	}
	var timer <-chan time.Time
	if !next.IsZero() {
		d := time.Until(next)
		if !exact {
			d = max(d, MinPollInterval-time.Since(ks.last))
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer:
			ks.last = time.Now()
			return ks.due(watch), nil
		case ev := <-ks.events:
			woke, err := ks.take(ev, watch)
			if err != nil {
				return nil, err
			}
			if woke == nil {
				continue
			}
			for more := true; more; { // and any other pending
				select {
				case ev := <-ks.events:
					w, err := ks.take(ev, watch)
					if err != nil {
						return nil, err
					}
					for _, i := range w {
						if !slices.Contains(woke, i) {
							woke = append(woke, i)
						}
					}
				default:
					more = false
				}
			}
			ks.last = time.Now()
			return woke, nil
		}
	}
}

// take applies ev to the set and returns the keys it makes worth a try
// now: its key, when watched or at the head of its line; every key of
// watch when a watched key's watch broke; none for another key's release.
func (ks *keySet) take(ev keyEvent, watch []int) ([]int, error) {
	switch {
	case ev.head && ev.err != nil:
		return nil, opError("lock", ks.keys[ev.i].key, ev.err)
	case ev.head:
		ks.keys[ev.i].atHead = true
		return []int{ev.i}, nil
	case ev.broke:
		ks.watchBroke()
		if slices.Contains(watch, ev.i) {
			return slices.Clone(watch), nil
		}
		return nil, nil
	case slices.Contains(watch, ev.i):
		return []int{ev.i}, nil
	}
	return nil, nil
}

// due returns the keys of watch due to be tried again, the earliest first;
// all of them when none is.
func (ks *keySet) due(watch []int) []int {
	now := time.Now()
	var due []int
	for _, i := range watch {
		if !ks.keys[i].until.After(now) {
			due = append(due, i)
		}
	}
	if len(due) == 0 {
		return slices.Clone(watch)
	}
	slices.SortFunc(due, func(a, b int) int { return ks.keys[a].until.Compare(ks.keys[b].until) })
	return due
}

// awaitFree waits, at the head of key i's WithFIFO line, until its lease
// looks free (backend.Inspector): while a lease is live it sleeps until
// its release is announced (backend.Notifier) or its time and lock delay
// have passed, looking again at each fallback poll; during a lock delay,
// until the delay is over. A grant attempt then finds the key free, so a
// handoff costs one attempt. Without an Inspector, or when the inspection
// fails, it returns at once and the grant is the probe.
func (ks *keySet) awaitFree(ctx context.Context, i int) error {
	insp, ok := ks.c.backend.(backend.Inspector)
	if !ok {
		return nil
	}
	w := &ks.keys[i]
	for {
		st, err := timedAttempt(ks.c, ctx, func(ctx context.Context) (backend.KeyState, error) { return insp.Inspect(ctx, w.key) })
		if err != nil {
			return ctx.Err() // nil: the grant will tell
		}
		var left time.Duration // until a grant can succeed without a release; 0: unknown
		switch {
		case st.Live && st.Remaining > 0:
			left = st.Remaining + st.LockDelay
		case st.Live:
		case st.DelayRemaining > 0:
			left = st.DelayRemaining
		default:
			return nil
		}
		w.seen = &backend.HeldError{Remaining: left, Delayed: !st.Live}
		d := pace(ks.poll, left)
		t := time.NewTimer(d)
		fired, woke, broke := false, false, false
		for !fired && !woke {
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case ev := <-ks.events:
				w, _ := ks.take(ev, []int{i})
				woke, broke = w != nil, ev.broke
			case <-t.C:
				fired = true
			}
		}
		t.Stop()
		switch {
		case woke && !broke && st.Live:
			ks.last = time.Now()
			return nil // a release, or an expiry the store saw: try now
		case fired && left > 0 && d >= left:
			ks.last = time.Now()
			return nil
		}
	}
}

// turns are the in-process lines of LockAny's waiters without WithFIFO:
// the waiters of one Coordinator on one key set (a Semaphore's slots) take
// turns, only the first in line waiting on the store, so that a release
// wakes one grant attempt per process, not one per waiting goroutine. (With
// WithFIFO the store's lines wake only their heads.)
type turns struct {
	mu    sync.Mutex
	lines map[string][]chan struct{} // by setID; the first's channel is closed: its turn
}

// wait puts a waiter in the line of keys and waits for its turn, or until
// ctx ends; leave takes the waiter out of the line, giving the next its
// turn.
func (t *turns) wait(ctx context.Context, keys []string) (leave func(), err error) {
	set := setID(keys)
	turn := make(chan struct{})
	t.mu.Lock()
	if t.lines == nil {
		t.lines = make(map[string][]chan struct{})
	}
	t.lines[set] = append(t.lines[set], turn)
	if len(t.lines[set]) == 1 {
		close(turn)
	}
	t.mu.Unlock()
	leave = func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		line := t.lines[set]
		i := slices.Index(line, turn)
		line = slices.Delete(line, i, i+1)
		switch {
		case len(line) == 0:
			delete(t.lines, set)
		case i == 0:
			close(line[0])
			fallthrough
		default:
			t.lines[set] = line
		}
	}
	select {
	case <-turn:
		return leave, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// setID names a key set, in its order, so that no two sets share a name.
func setID(keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// maxBackoff bounds the pause between a waiter's attempts while the store
// is away (backoff).
const maxBackoff = time.Second

// backoff paces a waiter's attempts while the store is away (IsTransient):
// a jittered pause that doubles from MinPollInterval up to maxBackoff, and
// starts again from there once the store answers (reset).
type backoff struct{ d time.Duration }

// wait sleeps for the next pause, or until ctx ends.
func (b *backoff) wait(ctx context.Context) error {
	b.d = min(max(2*b.d, MinPollInterval), maxBackoff)
	return sleep(ctx, b.d/2+rand.N(b.d/2+1))
}

// reset starts the pauses again from the shortest.
func (b *backoff) reset() { b.d = 0 }

// pause waits a short jittered while before an ambiguous grant is resent.
func (ks *keySet) pause(ctx context.Context) error {
	d := MinPollInterval + rand.N(MinPollInterval)
	if err := sleep(ctx, d); err != nil {
		return err
	}
	ks.last = time.Now()
	return nil
}

// watchBroke is the wait's answer to a notification channel closed under
// it: it polls from now on, at least as often as on a backend that cannot
// notify.
func (ks *keySet) watchBroke() {
	ks.poll = min(ks.poll, DefaultPollIntervalNoNotify)
}
