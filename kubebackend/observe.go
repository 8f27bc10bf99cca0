package kubebackend

import "time"

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

// observation is when the backend first saw one state of a Lease.
type observation struct {
	rv   string
	seen time.Time
}

// observe returns when the backend first saw state rv of Lease name, and
// records at as that time if rv is new to it.
func (b *Backend) observe(name, rv string, at time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if o, ok := b.seen[name]; ok && o.rv == rv {
		return o.seen
	}
	b.seen[name] = observation{rv: rv, seen: at}
	return at
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
	if o, ok := b.seen[name]; ok && o.rv == rv && o.seen.Before(sent) {
		return
	}
	b.seen[name] = observation{rv: rv, seen: sent}
}
