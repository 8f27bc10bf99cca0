package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// testLinearizable runs concurrent clients doing random grants, renewals,
// releases, token checks, stale calls from older leases, resent grants,
// Locks and Holds, and (where the backend can) forced releases, over a few
// keys while time passes, some of their responses lost, and checks the
// recorded history with CheckHistory: a renewal that succeeds raced against
// an expiry or a forced release must leave a live lease.
func (s suite) testLinearizable(t *testing.T) {
	history := s.randomHistory(t, 1, 120, false)
	grants := 0
	for _, op := range history {
		if op.Kind == OpGrant && op.Err == nil {
			grants++
		}
	}
	if grants < len(historyKeys) {
		t.Fatalf("only %d grants succeeded in the randomized history; it tested nothing", grants)
	}
	CheckLinearizable(t, history, s.traits)
	t.Logf("checked %d calls, %d successful grants", len(history), grants)
}

// testLinearizableMany is testLinearizable with GrantMany (and LockMany)
// over overlapping sets of the keys in random orders among the clients'
// calls: the history is checked with the keys joined, so each GrantMany
// must take all its keys at one moment or none.
func (s suite) testLinearizableMany(t *testing.T) {
	history := s.randomHistory(t, 2, 120, true)
	var many, refused int
	for _, op := range history {
		if op.Kind != OpGrantMany {
			continue
		}
		if op.Err == nil {
			many++
		} else if _, ok := backend.ManyIndex(op.Err); ok {
			refused++
		}
	}
	if many == 0 || refused == 0 {
		t.Fatalf("%d GrantMany calls succeeded and %d were refused in the randomized history; it tested too little", many, refused)
	}
	CheckLinearizable(t, history, s.traits)
	t.Logf("checked %d calls, %d successful and %d refused GrantMany calls", len(history), many, refused)
}

var historyKeys = []string{"h0", "h1", "h2"}

// randomHistory runs the clients of testLinearizable with the given seed and
// number of calls per client on a fresh backend and returns what they did;
// with many, the clients also call GrantMany and LockMany (see
// testLinearizableMany) on a backend of ManyHarness's.
func (s suite) randomHistory(t *testing.T, seed uint64, opsPerWorker int, many bool) []Op {
	b := s.backend(t)
	keys, choices := historyKeys, 22
	if many {
		// More keys, so that sets of several are often free together.
		b, choices = s.manyBackend(t), 27
		keys = append(slices.Clip(historyKeys), "h3", "h4")
		capability[backend.MultiGranter](t, b, "backend.MultiGranter")
	}
	rec := NewRecorder(s.traits.Now)
	const workers = 5
	timeout, margin := 40*time.Millisecond, 10*time.Millisecond
	pause := 15 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	holdTTL, holdMargin := timeout, margin
	if s.traits.Now == nil {
		timeout, margin = s.short()
		holdTTL, holdMargin = s.holdTTL(t)
		pause = timeout / 4
		deadline = time.Now().Add(4*(timeout+margin) + 2*time.Second)
	}
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		var lossb backend.Backend = &lossy{Backend: b, rng: rand.New(rand.NewPCG(seed, uint64(w)+100)), percent: 3}
		if mg, ok := b.(backend.MultiGranter); ok && many {
			lossb = &lossyMany{lossb.(*lossy), mg}
		}
		client := rec.Wrap(lossb)
		c := fencing.New(client, fencing.WithOutcomeRetries(2))
		// An operator's forced releases, racing the holders' renewals.
		forcer, _ := rec.Wrap(b).(backend.ForceReleaser)
		wg.Go(func() {
			ctx := context.Background()
			held := make(map[string]fencing.Lease) // what this client believes it holds
			var old []fencing.Lease                // leases it held once
			forget := func(key string) {
				if l, ok := held[key]; ok {
					old = append(old, l)
					delete(held, key)
				}
			}
			for op := 0; op < opsPerWorker && time.Now().Before(deadline); op++ {
				key := keys[rng.IntN(len(keys))]
				lease, holding := held[key]
				switch r := rng.IntN(choices); {
				case r < 5:
					l, err := c.Grant(ctx, key, timeout, margin)
					if err == nil {
						forget(key)
						held[key] = l
					} else if !errors.Is(err, fencing.ErrLeaseHeld) && !errors.Is(err, fencing.ErrOutcomeUnknown) &&
						!errors.Is(err, fencing.ErrLeaseExpired) && // a lost grant's resend found its lease expired
						!errors.Is(err, fencing.ErrLeaseNotFound) { // or forced out
						t.Errorf("Grant(%q): %v", key, err)
					}
				case r < 8 && holding:
					// Now and then with another timeout: some stores
					// serve that by another code path.
					l, err := c.Renew(ctx, key, lease.ID, timeout*time.Duration(1+rng.IntN(2)), margin)
					if err == nil {
						held[key] = l
					} else {
						forget(key)
					}
				case r < 10 && holding:
					c.Release(ctx, key, lease.ID)
					forget(key)
				case r < 14:
					if _, _, err := c.Token(ctx, key); err != nil {
						t.Errorf("Token(%q): %v", key, err)
					}
				case r < 15 && len(old) > 0:
					// A call from an older epoch of a key: late, stale.
					o := old[rng.IntN(len(old))]
					switch rng.IntN(3) {
					case 0:
						c.Renew(ctx, o.Key, o.ID, timeout, margin)
					case 1:
						c.Release(ctx, o.Key, o.ID)
					default: // a grant resent long after
						client.Grant(ctx, backend.Request{Key: o.Key, LeaseID: o.ID, Timeout: timeout, Margin: margin})
					}
				case r < 16 && holding:
					// A resent grant of the lease held: the same lease back.
					client.Grant(ctx, backend.Request{Key: key, LeaseID: lease.ID, Timeout: timeout, Margin: margin})
				case r < 17:
					s.lockBriefly(t, c, holdTTL, holdMargin, key)
				case r == choices-1:
					// LockAny of two or three keys in a random order.
					perm := rng.Perm(len(keys))[:2+rng.IntN(2)]
					set := make([]string, len(perm))
					for i, k := range perm {
						set[i] = keys[k]
					}
					s.lockAnyBriefly(t, c, holdTTL, holdMargin, set...)
				case r >= 21 && r <= 24:
					// Two or three keys in a random order.
					perm := rng.Perm(len(keys))[:2+rng.IntN(2)]
					set := make([]string, len(perm))
					for i, k := range perm {
						set[i] = keys[k]
					}
					leases, err := c.GrantMany(ctx, set, timeout, margin)
					if err == nil {
						for _, l := range leases {
							forget(l.Key)
							held[l.Key] = l
						}
					} else if !errors.Is(err, fencing.ErrLeaseHeld) && !errors.Is(err, fencing.ErrOutcomeUnknown) &&
						!errors.Is(err, fencing.ErrLeaseExpired) && !errors.Is(err, fencing.ErrLeaseNotFound) {
						t.Errorf("GrantMany(%q): %v", set, err)
					}
				case r == 25:
					s.lockBriefly(t, c, holdTTL, holdMargin, historyKeys[2], historyKeys[0])
				case r == 20 && forcer != nil:
					if _, err := forcer.ForceRelease(ctx, key); err != nil {
						t.Errorf("ForceRelease(%q): %v", key, err)
					}
				default:
					d := time.Duration(rng.Int64N(int64(pause)))
					if rng.IntN(4) == 0 {
						d = timeout + margin // outlive a lease: its holder renews late
					}
					if err := s.h.Wait(ctx, d); err != nil {
						t.Errorf("Wait: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	return rec.History()
}

// lockBriefly waits a little for keys with Lock (LockMany for several),
// holds them for a moment and releases them: Hold's and Lock's calls join
// the history.
func (s suite) lockBriefly(t *testing.T, c *fencing.Coordinator, ttl, margin time.Duration, keys ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	opts := []fencing.LockOption{fencing.WithMargin(margin), fencing.WithPollInterval(10 * time.Millisecond)}
	var h interface{ Release(context.Context) error }
	var err error
	if len(keys) == 1 {
		h, err = c.Lock(ctx, keys[0], ttl, opts...)
	} else {
		h, err = c.LockMany(ctx, keys, ttl, opts...)
	}
	if err != nil {
		var oe *fencing.OutcomeError
		// Lock waits out a held key and starts afresh after its own lost
		// grant's lease ended: it gives up only with its context (and an
		// OutcomeError when a grant's outcome is still unknown).
		if !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &oe) {
			t.Errorf("Lock(%q): %v", keys, err)
		}
		return
	}
	time.Sleep(time.Millisecond)
	h.Release(context.Background())
}

// lockAnyBriefly waits a little for one of keys with LockAny, holds it for
// a moment and releases it: its grants join the history.
func (s suite) lockAnyBriefly(t *testing.T, c *fencing.Coordinator, ttl, margin time.Duration, keys ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	opts := []fencing.LockOption{fencing.WithMargin(margin), fencing.WithPollInterval(10 * time.Millisecond)}
	h, err := c.LockAny(ctx, keys, ttl, opts...)
	if err != nil {
		var oe *fencing.OutcomeError
		// As Lock's (lockBriefly).
		if !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &oe) {
			t.Errorf("LockAny(%q): %v", keys, err)
		}
		return
	}
	if !slices.Contains(keys, h.Lease().Key) {
		t.Errorf("LockAny(%q) got key %q", keys, h.Lease().Key)
	}
	time.Sleep(time.Millisecond)
	h.Release(context.Background())
}

// lossy loses a few responses, and a few requests, of the calls that
// change things: the call takes effect (or not) and the caller learns
// neither.
type lossy struct {
	backend.Backend
	mu      sync.Mutex
	rng     *rand.Rand
	percent int
}

var errLost = fmt.Errorf("conformance: response lost (injected): %w", backend.ErrOutcomeUnknown)

// fate returns whether to send the request, and whether to lose its
// response.
func (l *lossy) fate() (send, lose bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch n := l.rng.IntN(100); {
	case n < l.percent:
		return true, true
	case n < 2*l.percent:
		return false, true
	}
	return true, false
}

func (l *lossy) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	send, lose := l.fate()
	var lease backend.Lease
	var err error
	if send {
		lease, err = l.Backend.Grant(ctx, req)
	}
	if lose {
		return backend.Lease{}, errLost
	}
	return lease, err
}

func (l *lossy) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	send, lose := l.fate()
	var lease backend.Lease
	var err error
	if send {
		lease, err = l.Backend.Renew(ctx, req)
	}
	if lose {
		return backend.Lease{}, errLost
	}
	return lease, err
}

func (l *lossy) Release(ctx context.Context, key, leaseID string) error {
	send, lose := l.fate()
	var err error
	if send {
		err = l.Backend.Release(ctx, key, leaseID)
	}
	if lose {
		return errLost
	}
	return err
}

// lossyMany is lossy with GrantMany, whose requests and responses it loses
// as lossy does.
type lossyMany struct {
	*lossy
	mg backend.MultiGranter
}

func (l *lossyMany) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	send, lose := l.fate()
	var leases []backend.Lease
	var err error
	if send {
		leases, err = l.mg.GrantMany(ctx, reqs)
	}
	if lose {
		return nil, errLost
	}
	return leases, err
}
