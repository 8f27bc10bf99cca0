package kubebackend

import (
	"strconv"
	"time"
)

// Expiry by observation.
//
// The API server never expires a Lease and offers no clock to read, so the
// backend decides expiry as client-go's LeaderElector does: each state of a
// Lease (one resourceVersion) is timed on this process's monotonic clock
// from when the backend first saw it (for its own writes, from just before
// the write was sent). The holder's lease has ended once its ttl + margin
// has passed since then; a lock delay adds its length. A backend that
// restarts, or another process, has seen nothing yet: it waits a whole
// ttl + margin from its first read before it takes an abandoned lease.

// observation is when the backend first saw the latest state of a Lease it
// has seen, and the state before it: a read that was served before a write
// and returns after the write was observed (a read racing a release, a
// reclaiming pass's List racing a grant) finds its state's first sighting
// still there, instead of timing it afresh.
type observation struct {
	rv       string
	seen     time.Time
	prevRV   string
	prevSeen time.Time
}

// older reports whether resourceVersion a is below b (both integers).
func older(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x < y
}

// An ObservationLog keeps the backend's observations of Leases beyond one
// process, so that a process started later (a command run again in a
// shell loop) times a Lease from when an earlier one first saw it, instead
// of from its own first read. Observations are durations before the call,
// never times, so that the log may keep them on a clock that every process
// sharing it reads alike (CLOCK_BOOTTIME on one host: the fencing command
// keeps its log in its state directory); only processes that share such a
// clock may share a log, and one log serves one API server and namespace.
//
// A log that loses an observation, or answers none, only makes the backend
// wait longer; one that reports a state as first seen earlier than it was
// makes it take a live lease early, so the log must err the other way. The
// backend calls it under its own lock: its methods should be quick (a small
// file) and must not call the backend.
type ObservationLog interface {
	// Seen returns how long before the call state rv of Lease name was
	// first seen by a process sharing the log, if it was.
	Seen(name, rv string) (ago time.Duration, ok bool)
	// Saw records that state rv of Lease name was first seen ago before
	// the call, replacing what the log held for name.
	Saw(name, rv string, ago time.Duration)
}

// WithObservationLog makes the backend time each state of a Lease from when
// a process sharing log first saw it, and record in log what it sees first
// (see ObservationLog). Without it the backend keeps its observations in
// memory only and does no I/O of its own.
func WithObservationLog(log ObservationLog) Option {
	return func(b *Backend) { b.log = log }
}

// observe returns when the backend first saw state rv of Lease name, and
// records at as that time if rv is new to it (and to its observation log).
func (b *Backend) observe(name, rv string, at time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.seen[name]
	switch {
	case ok && o.rv == rv:
		return o.seen
	case ok && o.prevRV == rv:
		return o.prevSeen
	case ok && older(rv, o.rv):
		// A state older than the two last seen: when it was first seen is
		// lost; timing it from now only makes the backend wait longer
		// (and a write carrying it fails with a conflict).
		return at
	}
	seen := at
	if b.log != nil {
		if ago, ok := b.log.Seen(name, rv); ok && ago > 0 {
			seen = at.Add(-ago)
		} else {
			b.log.Saw(name, rv, 0)
		}
	}
	b.seen[name] = observation{rv: rv, seen: seen, prevRV: o.rv, prevSeen: o.seen}
	return seen
}

// status is a record as this backend sees it at one moment.
type status struct {
	record
	live      bool          // a holder's lease has not run out
	delayed   bool          // no lease is live, and a lock delay runs
	remaining time.Duration // the live lease's or the delay's time left
	since     time.Duration // how long the backend has seen this state
}

// judge times r, seen at seen, at now.
func judge(r record, seen, now time.Time) status {
	s := status{record: r, since: now.Sub(seen)}
	switch {
	case r.held():
		if left := r.ttl - s.since; left > 0 {
			s.live, s.remaining = true, left
		} else if left += r.delay; left > 0 {
			s.delayed, s.remaining = true, left
		}
	case r.forced && r.delay > 0:
		if left := r.delay - s.since; left > 0 {
			s.delayed, s.remaining = true, left
		}
	}
	return s
}

// observeWrite records state rv of Lease name as written by this backend,
// its write sent at sent: the earliest of that and any read of it that
// returned first.
func (b *Backend) observeWrite(name, rv string, sent time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.seen[name]
	switch {
	case ok && o.rv == rv:
		if o.seen.Before(sent) {
			return
		}
		o.seen = sent
	case ok && older(rv, o.rv): // a later state was seen first
		if o.prevRV != rv || sent.Before(o.prevSeen) {
			o.prevRV, o.prevSeen = rv, sent
		}
		b.seen[name] = o
		return
	default:
		o = observation{rv: rv, seen: sent, prevRV: o.rv, prevSeen: o.seen}
	}
	b.seen[name] = o
	if b.log != nil {
		b.log.Saw(name, rv, max(b.now().Sub(sent), 0))
	}
}
