package fencing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// WithFIFO makes Lock wait in the key's line (backend.Queuer): waiters, in
// this process and others, get the key in the order their wait began, and
// each handoff wakes only the next waiter, which then makes a single grant
// attempt to a free key. Hold and Do, which do not wait, ignore it.
//
// The line is advisory: a grant outside it (Grant, Hold, Lock without
// WithFIFO) can still take a free key, and the waiter at the head then
// waits for that lease as Lock always does. A waiter joins the line with
// an entry that lives for Lock's ttl, renewed every third of it while it
// waits (a renewal that fails or gets no answer within that third is
// retried after a short pause, so the entry expires only when the store
// confirms none for a whole ttl). It leaves the line as soon as it gets the key, so that the next
// waiter takes the head while the lease is held: that waiter inspects the
// key (backend.Inspector), waits for the release to be announced (or the
// lease's time and lock delay to pass), and then makes its one grant
// attempt. A waiter whose wait fails leaves before Lock returns (within the
// request timeout, see WithRequestTimeout). A waiter that dies in line (its
// process killed, its connection cut) delays the waiters behind it by at
// most ttl, rounded up as the store rounds an entry's TTL (etcd: to whole
// seconds), plus the time its store takes to see the expiry.
//
// The lease's Deadline counts, as for every Lock, from the send of the
// grant request that the waiter makes at the head of the line: that send
// provably precedes the grant, which waiting in the line does not.
//
// On a backend that does not implement backend.Queuer, Lock with WithFIFO
// returns an error wrapping errors.ErrUnsupported before it waits.
func WithFIFO() LockOption {
	return lockOption(func(c *lockConfig) error {
		c.fifo = true
		return nil
	})
}

// line is one Lock call's entry in its key's line. A keeper goroutine
// renews the entry from the join until the waiter leaves: when the wait
// fails, or as soon as the waiter got the key.
type line struct {
	c      *Coordinator
	q      backend.Queuer
	ctx    context.Context // Lock's values, without its cancellation; canceled by cancel
	cancel context.CancelFunc
	key    string
	id     string // the waiter ID, a credential drawn like a lease ID
	ttl    time.Duration
	poll   time.Duration
	turn   backend.Subscription
	turnCh <-chan struct{}
	ahead  int // the latest Place's Ahead that waitTurn saw
	// lastErr is the store's error at waitTurn's latest look, when the
	// store was away (IsTransient); nil once it answers.
	lastErr error

	got      chan struct{} // closed by gotKey: the waiter holds the key
	stop     chan struct{} // closed by leave
	stopOnce sync.Once
	done     chan struct{} // closed when the keeper has returned
}

// errNoQueuer is Lock's error with WithFIFO on a backend without a line.
var errNoQueuer = fmt.Errorf("WithFIFO: the backend keeps no line of waiters (backend.Queuer): %w", errors.ErrUnsupported)

// joinLine subscribes to the turns of a new waiter on key, then puts it at
// the end of the line (so a leave between the two is not missed), and
// starts the keeper.
func (c *Coordinator) joinLine(ctx context.Context, key string, ttl, poll time.Duration) (*line, error) {
	q, ok := c.backend.(backend.Queuer)
	if !ok {
		return nil, errNoQueuer
	}
	l := &line{
		c: c, q: q, key: key, id: c.newLeaseID(), ttl: ttl, poll: poll,
		got: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if l.poll == 0 {
		l.poll = DefaultPollInterval
	}
	sub, err := timedAttempt(c, ctx, func(ctx context.Context) (backend.Subscription, error) { return q.NotifyTurn(ctx, key, l.id) })
	if err != nil {
		return nil, err
	}
	l.turn, l.turnCh = sub, sub.Freed()
	if _, err := l.enqueue(ctx); err != nil {
		sub.Close()
		// The join may have taken effect: remove it, as leave would.
		l.dequeue()
		l.cancel()
		return nil, err
	}
	go l.keep()
	return l, nil
}

// leave stops the keeper, which dequeues the entry, and waits for it. ctx,
// when not nil, bounds the Dequeue too (Held.Release's); Lock's failed wait
// passes nil, its own context being done. Later calls only wait.
func (l *line) leave(ctx context.Context) {
	if ctx != nil {
		defer context.AfterFunc(ctx, l.cancel)()
	}
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	l.cancel()
}

// enqueue joins or renews the entry and returns its place.
func (l *line) enqueue(ctx context.Context) (backend.Place, error) {
	return timedAttempt(l.c, ctx, func(ctx context.Context) (backend.Place, error) { return l.q.Enqueue(ctx, l.key, l.id, l.ttl) })
}

// dequeue removes the entry, bounded by the request timeout, or by the
// entry's TTL (after which it has left anyway) when there is none, and by
// the line's context (see leave).
func (l *line) dequeue() {
	bound := l.ttl
	if l.c.reqTimeout > 0 {
		bound = min(bound, l.c.reqTimeout)
	}
	ctx, cancel := context.WithTimeout(l.ctx, bound)
	defer cancel()
	_, _ = timedAttempt(l.c, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, l.q.Dequeue(ctx, l.key, l.id) })
}

// waitTurn waits until the entry is at the head of the line: woken by a
// leave ahead (NotifyTurn), or when the entry directly ahead would expire
// (Place.AheadRemaining), or by the poll interval, with jitter. It renews
// the entry each time it looks.
func (l *line) waitTurn(ctx context.Context) error {
	defer l.turn.Close() // at the head, only a release matters
	var away backoff
	for {
		p, err := l.enqueue(ctx)
		if err == nil {
			l.ahead, l.lastErr = p.Ahead, nil
			away.reset()
		}
		switch {
		case err == nil && p.Ahead == 0:
			return nil
		case err != nil && (ctx.Err() != nil || !IsTransient(err)):
			return err
		case err != nil:
			// The store is away, or did not answer: Enqueue is
			// idempotent, look again after a pause.
			l.lastErr = err
			if err := away.wait(ctx); err != nil {
				return err
			}
			continue
		}
		t := time.NewTimer(pace(l.poll, p.AheadRemaining))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case _, ok := <-l.turnCh:
			if !ok { // the watch broke: poll from now on
				l.turnCh = nil
				l.poll = min(l.poll, DefaultPollIntervalNoNotify)
			}
		case <-t.C:
		}
		t.Stop()
	}
}

// gotKey tells the keeper that the waiter got the key, so that it leaves
// the line at once (the next waiter takes the head and waits for this
// lease's release). The Held that has the entry waits for the keeper in its
// Release (leave).
func (l *line) gotKey() {
	close(l.got)
}

// keep is the keeper goroutine: it renews the entry a third of its TTL
// after the latest renewal that went through was sent, until the waiter gets
// the key (gotKey) or leave is called, and then dequeues. An attempt is given
// up only a whole TTL after its send: on a loaded store it may wait behind the
// other waiters' calls, which wait as long as it takes, and one given up after
// a third of the TTL would join the back of that queue again, and again,
// while the entry expires (at the head of the line, waiting for the holder,
// the entry has no other renewal). When an attempt gets no answer within a
// third of the TTL (its request may be lost), another one starts beside it;
// one that fails is retried after a short jittered pause.
func (l *line) keep() {
	defer close(l.done)
	defer l.dequeue()
	interval := max(l.ttl/3, time.Millisecond)
	pause := max(min(interval/8, 100*time.Millisecond), time.Millisecond)
	last := time.Now() // about when the join was sent
	ctx, cancel := context.WithCancel(l.ctx)
	results := make(chan renewal)
	var wg sync.WaitGroup
	// Before the dequeue: end the attempts in flight and wait for them.
	defer wg.Wait()
	defer cancel()
	inFlight := 0
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.got:
			return
		case r := <-results:
			inFlight--
			switch {
			case r.err == nil:
				if r.sent.After(last) {
					last = r.sent
				}
				t.Reset(time.Until(last.Add(interval)))
			case inFlight == 0:
				t.Reset(pause/2 + rand.N(pause/2+1))
			}
		case <-t.C:
			sent := time.Now()
			actx, acancel := context.WithTimeout(ctx, l.ttl)
			inFlight++
			wg.Go(func() {
				defer acancel()
				_, err := l.enqueue(actx)
				select {
				case results <- renewal{sent, err}:
				case <-ctx.Done():
				}
			})
			t.Reset(interval) // no answer by then: another attempt
		}
	}
}

// renewal is the outcome of one of the keeper's attempts, and when it was
// sent.
type renewal struct {
	sent time.Time
	err  error
}

// lineError is Lock's last refusal when WithWaitTimeout ends a wait in the
// line before the head was reached.
type lineError struct{ ahead int }

func (e *lineError) Error() string {
	waiters := " waiters"
	if e.ahead == 1 {
		waiters = " waiter"
	}
	return ErrLeaseHeld.Error() + " (" + strconv.Itoa(e.ahead) + waiters + " ahead in line)"
}

func (e *lineError) Unwrap() error { return ErrLeaseHeld }
