package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/election"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/semaphore"
)

// The soak's keys: soakKeys are shared by Lock, Hold, Do, LockMany and the
// FIFO waiters (so that they contend with each other), soakKeys[0] by the
// frozen holder too; the election and the semaphore have keys of their own.
var soakKeys = []string{"soak/k0", "soak/k1", "soak/k2", "soak/k3"}

const (
	soakElection = "soak/leader"
	soakSem      = "soak/sem"
	soakSemSize  = 2
)

// soakOps are the operations of the mixed traffic; a worker picks one at
// random for each round.
var soakOps = []string{"lock", "hold", "do", "lockmany", "election", "semaphore", "fifo"}

// soakTraffic runs the mixed traffic of one backend.
type soakTraffic struct {
	coord *fencing.Coordinator
	guard *guard.Memory
	check *soakCheck
	ttl   time.Duration
	elect *election.Election
	sem   *semaphore.Semaphore
	// ops are the operations the workers pick from: soakOps but those the
	// store cannot serve (soakStore.without).
	ops []string

	ok     atomic.Int64 // rounds that held their keys and wrote
	counts sync.Map     // error class -> *atomic.Int64
	sample sync.Map     // error class -> first error seen (for the log)
}

// count counts err (nil for a round that wrote) under its class.
func (tr *soakTraffic) count(op string, err error) {
	if err == nil {
		tr.ok.Add(1)
		return
	}
	class := soakClass(err)
	n, _ := tr.counts.LoadOrStore(class, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	tr.sample.LoadOrStore(class, op+": "+err.Error())
}

// soakClass sorts a round's error: the verdicts faults and contention are
// expected to cause, and "other".
func soakClass(err error) string {
	switch {
	case errors.Is(err, guard.ErrStaleToken):
		return "fenced"
	case errors.Is(err, fencing.ErrLeaseLost):
		return "lost"
	case errors.Is(err, fencing.ErrLeaseHeld):
		return "busy"
	case fencing.IsTransient(err):
		return "store"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	}
	return "other"
}

// classes returns the error counts by class.
func (tr *soakTraffic) classes() map[string]int64 {
	m := make(map[string]int64)
	tr.counts.Range(func(k, v any) bool {
		m[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return m
}

// worker runs rounds until ctx ends.
func (tr *soakTraffic) worker(ctx context.Context, id int) {
	for ctx.Err() == nil {
		op := tr.ops[rand.N(len(tr.ops))]
		err := tr.round(ctx, op, id)
		if ctx.Err() != nil {
			return // the run ended: the round's error is the run's end
		}
		tr.count(op, err)
		if err != nil {
			// A refused round backs off a little, as a caller would.
			sleepCtx(ctx, rand.N(tr.ttl/4)+time.Millisecond)
		}
	}
}

// round runs one operation: acquire, admit and write through the guard
// while the lease lasts, release.
func (tr *soakTraffic) round(ctx context.Context, op string, id int) error {
	wait := fencing.WithWaitTimeout(2 * tr.ttl)
	key := soakKeys[rand.N(len(soakKeys))]
	switch op {
	case "lock", "fifo":
		opts := []fencing.LockOption{wait}
		if op == "fifo" {
			opts = append(opts, fencing.WithFIFO())
		}
		snap := tr.check.before(key)
		h, err := tr.coord.Lock(ctx, key, tr.ttl, opts...)
		if err != nil {
			return err
		}
		tr.check.grant(op, key, snap, h.Token())
		return tr.useHeld(ctx, op, h)
	case "hold":
		snap := tr.check.before(key)
		h, err := tr.coord.Hold(ctx, key, tr.ttl)
		if err != nil {
			return err
		}
		tr.check.grant(op, key, snap, h.Token())
		return tr.useHeld(ctx, op, h)
	case "do":
		snap := tr.check.before(key)
		return tr.coord.Do(ctx, key, tr.ttl, func(ctx context.Context, l fencing.Lease) error {
			tr.check.grant(op, key, snap, l.Token)
			return tr.writes(ctx, op, []fencing.Lease{l})
		})
	case "lockmany":
		i := rand.N(len(soakKeys))
		keys := []string{soakKeys[i], soakKeys[(i+1+rand.N(len(soakKeys)-1))%len(soakKeys)]}
		snaps := []uint64{tr.check.before(keys[0]), tr.check.before(keys[1])}
		m, err := tr.coord.LockMany(ctx, keys, tr.ttl, wait)
		if err != nil {
			return err
		}
		ls := m.Leases()
		for j, l := range ls {
			tr.check.grant(op, l.Key, snaps[j], l.Token)
		}
		err = tr.writes(m.Context(), op, ls)
		return errors.Join(err, m.Release(context.WithoutCancel(ctx)))
	case "election":
		snap := tr.check.before(soakElection)
		cctx, cancel := context.WithTimeout(ctx, 2*tr.ttl)
		defer cancel()
		h, err := tr.elect.Campaign(cctx, fmt.Sprintf("worker-%d", id))
		if err != nil {
			return err
		}
		tr.check.grant(op, soakElection, snap, h.Token())
		return tr.useHeld(ctx, op, h)
	case "semaphore":
		snaps := make(map[string]uint64, soakSemSize)
		for i := range soakSemSize {
			k := semaphore.SlotKey(soakSem, i)
			snaps[k] = tr.check.before(k)
		}
		// Acquire's ctx bounds the wait and the permit: give it both.
		actx, cancel := context.WithTimeout(ctx, 4*tr.ttl)
		defer cancel()
		h, err := tr.sem.Acquire(actx, tr.ttl)
		if err != nil {
			return err
		}
		l := h.Lease()
		tr.check.grant(op, l.Key, snaps[l.Key], l.Token)
		return tr.useHeld(ctx, op, h)
	}
	return fmt.Errorf("unknown soak op %q", op)
}

// final locks a key no one else uses, waiting up to ctx's end, and writes
// under it: the store serves again.
func (tr *soakTraffic) final(ctx context.Context) error {
	const key = "soak/final"
	snap := tr.check.before(key)
	h, err := tr.coord.Lock(ctx, key, tr.ttl)
	if err != nil {
		return err
	}
	tr.check.grant("final", key, snap, h.Token())
	return tr.useHeld(ctx, "final", h)
}

// useHeld writes under h and releases it.
func (tr *soakTraffic) useHeld(ctx context.Context, op string, h *fencing.Held) error {
	err := tr.writes(h.Context(), op, []fencing.Lease{h.Lease()})
	return errors.Join(err, h.Release(context.WithoutCancel(ctx)))
}

// writes admits each lease's token at the guard (fencing out earlier
// holders at takeover), then makes one to three guarded writes with each,
// a few milliseconds apart, while ctx (the lease's) lasts.
func (tr *soakTraffic) writes(ctx context.Context, op string, ls []fencing.Lease) error {
	for _, l := range ls {
		if err := tr.guard.Admit(ctx, l.Key, l.Token); err != nil {
			if errors.Is(err, guard.ErrStaleToken) {
				tr.check.refused(op+" admit", l.Key, l.Token)
			}
			return err
		}
		tr.check.admitted(l.Key, l.Token)
	}
	for range 1 + rand.N(3) {
		for _, l := range ls {
			if err := tr.write(ctx, op, l.Key, l.Token); err != nil {
				return err
			}
		}
		if !sleepCtx(ctx, time.Duration(5+rand.N(20))*time.Millisecond) {
			return context.Cause(ctx)
		}
	}
	return nil
}

// write is one guarded write.
func (tr *soakTraffic) write(ctx context.Context, op, resource string, token uint64) error {
	err := tr.guard.Write(ctx, resource, token, func() error { return tr.check.write(op, resource, token) })
	if errors.Is(err, guard.ErrStaleToken) {
		tr.check.refused(op, resource, token)
	}
	return err
}

// sleepCtx sleeps d, or until ctx ends; it reports whether ctx is live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// soakFrozen is the holder the nemesis freezes: it keeps a lease on
// soakKeys[0] by hand (Grant, then Renew a third of the TTL after each
// confirmed request), and between checking that its lease is still
// unexpired and writing with its token it may be frozen. Frozen, it stops
// renewing too, as a SIGSTOPped process would; it stands in for a holder
// process stopped with SIGSTOP, within this process.
type soakFrozen struct {
	tr     *soakTraffic
	freeze chan chan struct{} // the nemesis sends a channel; closing it thaws
	frozen atomic.Int64       // freezes that caught a lease in hand
	late   atomic.Int64       // writes after a thaw, refused or admitted
}

// run holds and writes until ctx ends.
func (f *soakFrozen) run(ctx context.Context) {
	key := soakKeys[0]
	for ctx.Err() == nil {
		snap := f.tr.check.before(key)
		l, err := f.tr.coord.Grant(ctx, key, f.tr.ttl)
		if err != nil {
			if ctx.Err() == nil {
				f.tr.count("frozen", err)
			}
			sleepCtx(ctx, f.tr.ttl/4)
			// A freeze asked for while the key is taken waits for a lease.
			continue
		}
		f.tr.check.grant("frozen", key, snap, l.Token)
		err = f.hold(ctx, l)
		if ctx.Err() != nil {
			return
		}
		f.tr.count("frozen", err)
		_ = f.tr.coord.Release(context.WithoutCancel(ctx), key, l.ID)
	}
}

// hold writes with l for up to 2 TTLs, renewing by hand, and obeys a freeze.
func (f *soakFrozen) hold(ctx context.Context, l fencing.Lease) error {
	if err := f.tr.writes(ctx, "frozen", []fencing.Lease{l}); err != nil {
		return err
	}
	end := time.Now().Add(2 * f.tr.ttl)
	for time.Now().Before(end) {
		if time.Now().After(l.Deadline) {
			return fmt.Errorf("frozen holder: %w (deadline passed)", fencing.ErrLeaseLost)
		}
		// The lease is unexpired here: a freeze now is the pause of a
		// process between its check and its write.
		select {
		case thaw := <-f.freeze:
			f.frozen.Add(1)
			f.tr.check.event("frozen holder frozen with token %d", l.Token)
			select {
			case <-thaw:
			case <-ctx.Done():
				return ctx.Err()
			}
			f.late.Add(1)
			f.tr.check.event("frozen holder thawed, writes with token %d", l.Token)
			return f.tr.write(ctx, "frozen (late)", l.Key, l.Token)
		default:
		}
		if err := f.tr.write(ctx, "frozen", l.Key, l.Token); err != nil {
			return err
		}
		if time.Until(l.Deadline) < f.tr.ttl*2/3 {
			nl, err := f.tr.coord.Renew(ctx, l.Key, l.ID, f.tr.ttl)
			if err != nil {
				return err
			}
			l = nl
		}
		sleepCtx(ctx, f.tr.ttl/10)
	}
	return nil
}
