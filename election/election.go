// Package election elects one leader among candidates over a
// fencing.Coordinator, on any backend: each term is a fenced lease on the
// election's key, so its token is the term's fencing token, larger than
// every earlier term's, and a resource guard (package guard) refuses the
// writes of a leader whose term has ended, however long it stalled.
//
// A term is a fencing.Held held with Lock and the candidate's identity as
// its owner (fencing.WithOwner): Campaign waits as Lock does, the Held's
// Context ends the moment leadership is lost, and resigning is
// Held.Release, which ends exactly that term (a late or resent release of
// an older term never ends a newer one). Leader and Observe read the
// current term with Coordinator.Inspect, so they report a vacancy as such.
// Run puts it together: campaign, lead, and on loss stop leading and wait
// for the work to stop before campaigning again.
package election

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"time"

	"github.com/fencing-go/fencing"
)

// DefaultObserveInterval is how often Observe reads the election while no
// notification can tell it of a change: while the office is vacant (a new
// term is never announced) and, on a backend that cannot notify, always.
const DefaultObserveInterval = 100 * time.Millisecond

// maxObserveWait bounds Observe's wait while a term is live, in case a
// release notification is missed.
const maxObserveWait = time.Second

// Election is one election: candidates that campaign on the same key with
// the same Coordinator backend compete for one office. It is safe for
// concurrent use; its methods may be called by any number of goroutines.
type Election struct {
	c        *fencing.Coordinator
	key      string
	ttl      time.Duration
	lock     []fencing.LockOption
	interval time.Duration
}

// Option configures an Election.
type Option func(*Election)

// WithLockOptions adds options to every Campaign's Lock: the term's lease
// (its margin, renew interval, warning...) and the wait for it (its fallback
// poll, fencing.WithPollInterval; fencing.WithFIFO; fencing.WithWaitTimeout).
// A fencing.WithOwner among them is overridden by the candidate's identity.
func WithLockOptions(opts ...fencing.LockOption) Option {
	return func(e *Election) { e.lock = append(e.lock, opts...) }
}

// WithObserveInterval sets how often Observe reads the election when no
// notification can tell it of a change (default DefaultObserveInterval);
// a new term after a vacancy is seen within this time. Values below
// fencing.MinPollInterval are raised to it.
func WithObserveInterval(d time.Duration) Option {
	return func(e *Election) { e.interval = max(d, fencing.MinPollInterval) }
}

// New returns the election on key, whose terms are leases of ttl renewed in
// the background (see fencing.Coordinator.Hold). Every candidate of one
// election should use the same ttl: it is how long a leader that stalls
// keeps the office before another can take it.
func New(c *fencing.Coordinator, key string, ttl time.Duration, opts ...Option) *Election {
	e := &Election{c: c, key: key, ttl: ttl, interval: DefaultObserveInterval}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Key returns the election's key.
func (e *Election) Key() string { return e.key }

// Campaign waits until this candidate leads, or ctx ends, and returns the
// term. It waits as fencing.Coordinator.Lock does: woken by the end of the
// current term (a resignation and, where the backend reports it, an
// expiry), or when the term's lease should have ended, never by busy
// polling. identity is the candidate's public label (an address, "host-3/pid
// 4711"), stored as the term's owner; Leader and Observe report it. It must
// pass backend.CheckOwner.
//
// The Held's Token is the term's fencing token; its Context ends the
// moment leadership is lost (a refused renewal, or the Deadline of the last
// confirmed renewal passing). Resign with Held.Release.
//
// A Campaign whose ctx ends returns ctx's error and leaves nothing behind:
// no subscription, no goroutine, and no lease (a grant whose outcome is
// unknown is released before Campaign returns, see Lock; when that release
// fails too, the error also wraps Lock's *fencing.OutcomeError, whose
// LeaseID is the caller's to settle). The term's lease
// outlives ctx: ctx bounds the waiting, the term ends with Release or its
// loss. To end the term with a context, see Run.
func (e *Election) Campaign(ctx context.Context, identity string) (*fencing.Held, error) {
	opts := append(append([]fencing.LockOption(nil), e.lock...), fencing.WithOwner(identity))
	// The term must outlive ctx, which bounds only the waiting: Lock's
	// context is one that only ctx ending before the term begins cancels.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	h, err := e.c.Lock(lctx, e.key, e.ttl, opts...)
	if !stop() { // ctx ended: no term may be left behind
		var oe *fencing.OutcomeError
		switch {
		case err == nil:
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.ttl)
			_ = h.Release(rctx)
			rcancel()
		case errors.As(err, &oe) && !oe.Settled:
			return nil, fmt.Errorf("election: campaign: %w: %w", context.Cause(ctx), err) // and its lease ID, to settle
		}
		return nil, fmt.Errorf("election: campaign: %w", context.Cause(ctx))
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("election: campaign: %w", err)
	}
	return h, nil
}

// Leader is an election's current term, as the coordinator sees it.
type Leader struct {
	// Live says a term is live: someone leads. A vacancy has Live false and
	// every other field zero but LastToken.
	Live bool
	// Identity is the leader's identity, as given to Campaign.
	Identity string
	// Token is the term's fencing token.
	Token uint64
	// ExpiresAt is when the term ends on the coordinator's clock unless
	// the leader renews it (an estimate on backends that cannot read that
	// clock; see backend.KeyState).
	ExpiresAt time.Time
	// Remaining is how long the term had left when it was read, by the
	// coordinator's clock.
	Remaining time.Duration
	// LastToken is the highest token the election ever issued: the current
	// term's, or the last ended one's during a vacancy.
	LastToken uint64
}

// Leader returns the current term, read in one linearizable request
// (fencing.Coordinator.Inspect); a vacancy is Live == false and a nil error.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	st, err := e.c.Inspect(ctx, e.key)
	if err != nil {
		return Leader{}, fmt.Errorf("election: leader: %w", err)
	}
	if !st.Live {
		return Leader{LastToken: st.MaxToken}, nil
	}
	return Leader{Live: true, Identity: st.Owner, Token: st.Token, ExpiresAt: st.ExpiresAt, Remaining: st.Remaining, LastToken: st.MaxToken}, nil
}

// Observe returns the election's terms and vacancies as they come: first
// the current state, then each new term and each vacancy, in order, until
// ctx ends (or the loop breaks). It runs in the caller's goroutine, one read
// at a time, so a reader that falls behind is given the state of the
// election when it asks again (changes in between are coalesced; there is
// never a backlog), and it never blocks a backend's notifier, whose
// wake-ups have room for one and are dropped when one is pending.
//
// Between reads it waits for the end of the current term (a release
// notification, or the time the term has left), at most a second; during a
// vacancy, or on a backend that cannot notify, it reads every
// WithObserveInterval. A term shorter than that may be missed, and a term
// that ends and is followed by the next between two reads shows as a
// vacancy (LastToken the ended term's), then that next term: every term is
// followed by a vacancy, however short, even when the store's record went
// from one term to the next at once (a waiting candidate granted the
// moment a dead leader's term expired). A read that fails is yielded as an
// error, and Observe goes on after a pause unless the loop breaks.
func (e *Election) Observe(ctx context.Context) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		sub, err := e.c.NotifyFree(ctx, e.key)
		var freed <-chan struct{}
		switch {
		case err == nil:
			defer sub.Close()
			freed = sub.Freed()
		case ctx.Err() != nil:
			return
		case !errors.Is(err, errors.ErrUnsupported):
			if !yield(Leader{}, fmt.Errorf("election: observe: %w", err)) {
				return
			}
		}
		var last Leader
		first := true
		for ctx.Err() == nil {
			l, err := e.Leader(ctx)
			wait := e.interval
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return
				}
				if !yield(Leader{}, err) {
					return
				}
			case first || l.Live != last.Live || l.Token != last.Token:
				if !first && last.Live && l.Live {
					// Two terms never overlap: the one read last ended
					// before this one began, by a resignation or by
					// running its time out (its leader dead or cut off, the
					// office vacant for up to a TTL).
					if !yield(Leader{LastToken: last.Token}, nil) {
						return
					}
				}
				first, last = false, l
				if !yield(l, nil) {
					return
				}
			}
			if err == nil && l.Live && freed != nil {
				wait = min(max(l.Remaining, fencing.MinPollInterval), maxObserveWait)
			}
			t := time.NewTimer(wait/2 + rand.N(wait/2+1))
			select {
			case <-ctx.Done():
			case _, ok := <-freed:
				if !ok {
					freed = nil // the watch broke: poll
				}
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// Run campaigns with identity, runs lead under the term's context while
// this candidate leads, and campaigns again when it has lost the office,
// until ctx ends. lead's ctx ends when leadership is lost or ctx ends; term
// is the term's lease, whose Token lead sends with every write to the
// resources it leads. Run waits for lead to return before anything else:
// it never campaigns, nor resigns, while lead still runs, so one Run never
// has two leads running at once, and work from a lost term is over before
// a new term of this candidate starts.
//
// What ends the loop:
//   - ctx ending: Run waits for lead, resigns (so the next candidate takes
//     over at once, without waiting for the term to expire) and returns
//     ctx's error;
//   - lead returning while still leader: Run resigns and returns lead's
//     error (nil when lead finished its work);
//   - a Campaign error that retrying cannot cure (an invalid key, TTL,
//     option or identity, or an unsupported backend), returned as it is.
//
// lead returning after its term was lost (its ctx ended by the loss) is
// not an end: Run campaigns again. Other Campaign errors (an unreachable
// server) are retried with a jittered pause of up to a second.
func (e *Election) Run(ctx context.Context, identity string, lead func(ctx context.Context, term fencing.Lease) error) error {
	pause := 10 * time.Millisecond
	for {
		h, err := e.Campaign(ctx, identity)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if permanent(err) {
				return err
			}
			t := time.NewTimer(pause/2 + rand.N(pause/2+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 10 * time.Millisecond
		lctx, cancel := context.WithCancel(h.Context())
		stop := context.AfterFunc(ctx, cancel)
		leadErr := lead(lctx, h.Lease())
		stop()
		cancel()
		lost := h.Err() != nil && ctx.Err() == nil // the term ended by itself
		// Resign: even after ctx ended, so that the next candidate need
		// not wait for the term to expire. A release is bounded by the TTL:
		// past it the term has expired anyway.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.ttl)
		_ = h.Release(rctx)
		rcancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case !lost:
			return leadErr
		}
	}
}

// permanent reports whether a Campaign error would come back on a retry. A
// bad identity is one: fencing.WithOwner's error wraps ErrInvalidOption.
func permanent(err error) bool {
	for _, target := range []error{fencing.ErrInvalidKey, fencing.ErrInvalidTimeout, fencing.ErrInvalidMargin,
		fencing.ErrInvalidOption, fencing.ErrTokenSpaceExhausted, errors.ErrUnsupported} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
