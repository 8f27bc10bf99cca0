package kubebackend

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencing-go/fencing/backend"
)

// Reclaiming idle keys (WithRetention).
//
// One goroutine per backend, started by New and ended by Close, runs a pass
// every retention/8 (at least sweepFloor): it lists the backend's Leases
// (the managed label), a page at a time, judges each as a grant would (the
// same observations on the same monotonic clock), and deletes each Lease
// idle for the retention with a resourceVersion precondition: the API
// server deletes it only in the state the pass judged, so a grant that
// wrote the Lease since wins and the delete fails with a conflict. A grant
// that read the Lease before the delete gets a conflict when it writes (the
// deleted Lease's UID is a precondition of every update), reads again and
// creates it: the new Lease's resourceVersion, and so its first
// token, is above every resourceVersion the key's Leases ever had.
//
// A Lease's idleness is observed as its expiry is (see observe.go): a state
// released (no holder) is idle from when this backend first saw it; a state
// whose holder's lease ran out, from ttl + margin and any lock delay after
// that; a state a forced release wrote, from its lock delay after that. A
// state written by another process is first seen by a read or by a pass,
// at most one pass interval after it was written; so a key is reclaimed
// within the retention plus two pass intervals (retention/4) plus the
// length of a pass, after its lease ended and its lock delay passed as this
// backend observes them.

// DefaultRetention is the retention of a backend made without
// WithRetention: see WithRetention.
const DefaultRetention = 24 * time.Hour

const (
	// sweepFloor is the shortest interval between passes, so that a short
	// retention does not turn into a List a few milliseconds apart.
	sweepFloor = 100 * time.Millisecond
	// sweepPage is the page size of a pass's List.
	sweepPage = 500
	// sweepRequest bounds each request of a pass (a List page, a delete),
	// besides Close.
	sweepRequest = 30 * time.Second
)

// WithRetention sets how long a key's Lease outlives the key's last use:
// once a key has had no live lease and no lock delay for d, as this backend
// observes them, the backend deletes its Lease (with a resourceVersion
// precondition, so a grant that raced in wins), and the key then reads as
// one never leased, except that its next token is still above every token
// it had (see the package doc's "Retention" and backend's contract). d <= 0
// keeps every Lease for ever (and starts no goroutine).
//
// The default, DefaultRetention (24 hours), is long enough that no
// realistic pause outlives it (a stalled holder, a request resent after a
// partition: a resend after the retention may get a new lease instead of
// its verdict), and short enough that a workload of a key per job, order or
// file holds a day of keys in etcd, not every key it ever used, where
// etcd's quota (2 GiB by default) is shared with the whole cluster.
func WithRetention(d time.Duration) Option {
	return func(b *Backend) { b.retention = max(d, 0) }
}

// startSweep starts the reclaiming goroutine, when the retention is on.
func (b *Backend) startSweep() {
	if b.retention <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stopSweep, b.sweepDone = cancel, make(chan struct{})
	every := max(b.retention/8, sweepFloor)
	go func() {
		defer close(b.sweepDone)
		t := time.NewTicker(every)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A failed pass (the API server away, a Role without delete)
			// is tried again at the next tick; what it deleted stays
			// deleted. The log says when passes start and stop failing.
			err := b.sweep(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil && !failing:
				b.logger.Warn("kubebackend: reclaiming idle Leases failed; trying again every pass interval", "error", err, "interval", every)
			case err == nil && failing:
				b.logger.Info("kubebackend: reclaiming idle Leases works again")
			}
			failing = err != nil
		}
	}()
}

// sweep runs one pass: it deletes every Lease of the backend idle for the
// retention, and forgets the observations of Leases it no longer lists.
func (b *Backend) sweep(ctx context.Context) error {
	start := b.now()
	listed := make(map[string]bool)
	cursor := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, sweepRequest)
		list, err := b.leases.List(rctx, metav1.ListOptions{
			LabelSelector: managedLabel + "=true",
			Limit:         sweepPage,
			Continue:      cursor,
		})
		cancel()
		if err != nil {
			return readErr("list Leases", err)
		}
		now := b.now()
		for i := range list.Items {
			l := &list.Items[i]
			listed[l.Name] = true
			key, ok := storedKey(l)
			if !ok {
				continue
			}
			r, err := parse(l, key)
			if err != nil {
				continue // not a Lease the backend can judge: left alone
			}
			s := judge(r, b.observe(l.Name, r.rv, now), now)
			if idle, ok := s.idle(); !ok || idle < b.retention {
				continue
			}
			if err := b.reclaim(ctx, l.Name, r.rv); err != nil {
				return err
			}
		}
		if cursor = list.Continue; cursor == "" {
			break
		}
	}
	b.forgetUnlisted(listed, start)
	return nil
}

// reclaim deletes Lease name in state rv. A conflict (the Lease changed
// since: a grant came first) or a Lease already gone (another process's
// pass) is not an error: the pass goes on.
func (b *Backend) reclaim(ctx context.Context, name, rv string) error {
	rctx, cancel := context.WithTimeout(ctx, sweepRequest)
	defer cancel()
	err := b.leases.Delete(rctx, name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{ResourceVersion: &rv},
	})
	switch {
	case err == nil:
		b.reclaimed.Add(1)
		b.forget(name)
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return nil
	}
	return writeErr("delete Lease "+name, err)
}

// idle reports how long the state s was judged from has been idle: no
// live lease and no lock delay (false while either runs).
func (s status) idle() (time.Duration, bool) {
	if s.live || s.delayed {
		return 0, false
	}
	switch {
	case s.held(): // the holder's lease ran out, then its delay
		return s.since - s.ttl - s.delay, true
	case s.forced:
		return s.since - s.delay, true
	}
	return s.since, true
}

// forget drops the observation of Lease name (gone from the store).
func (b *Backend) forget(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.seen, name)
}

// forgetUnlisted drops the observations made before start of Leases that
// a pass did not list: Leases deleted (by another process), or not the
// backend's. An observation dropped only makes the backend time that state
// afresh, from a later moment: it waits longer, never less.
func (b *Backend) forgetUnlisted(listed map[string]bool, start time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, o := range b.seen {
		if !listed[name] && o.seen.Before(start) {
			delete(b.seen, name)
		}
	}
}

// Size implements backend.Sizer: Records is the number of the namespace's
// Leases that carry the backend's label (every key leased and not yet
// reclaimed, by any backend on this namespace), counted by a List a page
// of 500 at a time (one request per page, read from etcd); Reclaimed is the
// number of Leases this backend deleted since New.
func (b *Backend) Size(ctx context.Context) (backend.StoreSize, error) {
	if err := b.ready(ctx, nil); err != nil {
		return backend.StoreSize{}, err
	}
	var n int64
	cursor := ""
	for {
		list, err := b.leases.List(ctx, metav1.ListOptions{
			LabelSelector: managedLabel + "=true",
			Limit:         sweepPage,
			Continue:      cursor,
		})
		if err != nil {
			return backend.StoreSize{}, readErr("list Leases (size)", err)
		}
		n += int64(len(list.Items))
		if cursor = list.Continue; cursor == "" {
			break
		}
	}
	return backend.StoreSize{Records: n, Reclaimed: b.reclaimed.Load()}, nil
}
