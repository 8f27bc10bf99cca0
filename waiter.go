package fencing

import (
	"context"
	"math/rand/v2"
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

// keyWaiter is one Lock call's way of waiting for its key between grant
// attempts: the release notification, when the backend has one, and the
// poll that covers what it misses.
type keyWaiter struct {
	c     *Coordinator
	key   string
	poll  time.Duration
	sub   backend.Subscription
	freed <-chan struct{}
	last  time.Time          // when the previous grant attempt was let through
	seen  *backend.HeldError // what awaitFree last saw of a live lease or a lock delay

	unsubscribed error // the subscription's error while the store was away: the waiter polls
}

// subscribe sets up the notification, when the backend has one. A
// subscription that fails while the store is away (IsTransient) is not a
// reason to stop waiting: the waiter polls instead, as on a backend that
// cannot notify, and keeps the error in unsubscribed.
func (w *keyWaiter) subscribe(ctx context.Context) error {
	n, ok := w.c.backend.(backend.Notifier)
	if ok {
		sub, err := timedAttempt(w.c, ctx, func(ctx context.Context) (backend.Subscription, error) { return n.NotifyFree(ctx, w.key) })
		switch {
		case err == nil:
			w.sub, w.freed = sub, sub.Freed()
		case ctx.Err() != nil || !IsTransient(err):
			return err
		default:
			w.unsubscribed = err
		}
	}
	if w.poll == 0 {
		w.poll = DefaultPollInterval
		if w.sub == nil {
			w.poll = DefaultPollIntervalNoNotify
		}
	}
	if w.unsubscribed != nil {
		w.poll = min(w.poll, DefaultPollIntervalNoNotify)
	}
	w.last = time.Now()
	return nil
}

func (w *keyWaiter) close() {
	if w.sub != nil {
		w.sub.Close()
	}
}

// wait blocks until a notification, or until the holder's lease should have
// ended (remaining, when known), or the poll interval, whichever is first.
func (w *keyWaiter) wait(ctx context.Context, remaining time.Duration) error {
	d := w.poll
	if remaining > 0 && remaining < d {
		d = remaining + rand.N(min(remaining/10, 10*time.Millisecond)+1)
	} else {
		d = d/2 + rand.N(d/2+1)
	}
	d = max(d, MinPollInterval-time.Since(w.last))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case _, ok := <-w.freed:
		if !ok {
			w.watchBroke()
		}
	case <-t.C:
	}
	w.last = time.Now()
	return nil
}

// waitHeld blocks after a grant refused with held: during a lock delay
// (held.Delayed, see WithLockDelay) for exactly the delay's time left, since
// nothing but time frees the key before then; otherwise as wait does, for a
// live holder that may release at any moment.
func (w *keyWaiter) waitHeld(ctx context.Context, held *backend.HeldError) error {
	if !held.Delayed || held.Remaining <= 0 {
		return w.wait(ctx, held.Remaining)
	}
	t := time.NewTimer(held.Remaining)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case _, ok := <-w.freed: // early, and harmless: the next grant is refused with the time left
		if !ok {
			w.watchBroke()
		}
	case <-t.C:
	}
	w.last = time.Now()
	return nil
}

// awaitFree waits, at the head of a WithFIFO line, until key's lease looks
// free (backend.Inspector): while a lease is live it sleeps until its
// release is announced (backend.Notifier) or its time and lock delay have
// passed, looking again at each fallback poll; during a lock delay, until
// the delay is over. A grant attempt then finds the key free, so a handoff
// costs one attempt. Without an Inspector, or when the inspection fails, it
// returns at once and the grant is the probe.
func (w *keyWaiter) awaitFree(ctx context.Context) error {
	insp, ok := w.c.backend.(backend.Inspector)
	if !ok {
		return nil
	}
	for {
		st, err := timedAttempt(w.c, ctx, func(ctx context.Context) (backend.KeyState, error) { return insp.Inspect(ctx, w.key) })
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
		d := w.poll/2 + rand.N(w.poll/2+1)
		if left > 0 && left < d {
			d = left + rand.N(min(left/10, 10*time.Millisecond)+1)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case _, ok := <-w.freed:
			t.Stop()
			if !ok {
				w.watchBroke()
			} else if st.Live {
				w.last = time.Now()
				return nil // a release, or an expiry the store saw: try now
			}
		case <-t.C:
			if left > 0 && d >= left {
				w.last = time.Now()
				return nil
			}
		}
	}
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
func (w *keyWaiter) pause(ctx context.Context) error {
	d := MinPollInterval + rand.N(MinPollInterval)
	if err := sleep(ctx, d); err != nil {
		return err
	}
	w.last = time.Now()
	return nil
}

// watchBroke is the waiter's answer to a notification channel closed under
// it: it polls from now on, at least as often as on a backend that cannot
// notify.
func (w *keyWaiter) watchBroke() {
	w.freed = nil
	w.poll = min(w.poll, DefaultPollIntervalNoNotify)
}
