package natsbackend

import "time"

// Expiry by observation, as kubebackend's (see backend.ObservedExpiry): a
// JetStream KV entry has no per-update TTL (a per-key TTL is set only by
// Create, and a bucket's MaxAge ties every lease to one TTL), so each state
// of a key's entry (one revision) is timed on this process's monotonic
// clock from when the backend first saw it (for its own writes, from just
// before the write was sent). The holder's lease has ended once its
// ttl + margin has passed since then; a lock delay adds its length.

// observation is when the backend first saw the latest state of a key it
// has seen, and the state before it: a read served before a write that
// returns after the write was observed finds its state's first sighting
// still there, instead of timing it afresh.
type observation struct {
	rev      uint64
	seen     time.Time
	prevRev  uint64
	prevSeen time.Time
}

// observe returns when the backend first saw state rev of key, and records
// at as that time if rev is new to it.
func (b *Backend) observe(key string, rev uint64, at time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.seen[key]
	switch {
	case ok && o.rev == rev:
		return o.seen
	case ok && o.prevRev == rev:
		return o.prevSeen
	case ok && rev < o.rev:
		// Older than the two last seen: when it was first seen is lost;
		// timing it from now only makes the backend wait longer.
		return at
	}
	b.seen[key] = observation{rev: rev, seen: at, prevRev: o.rev, prevSeen: o.seen}
	return at
}

// observeWrite records state rev of key as written by this backend, its
// write sent at sent: the earliest of that and any read of it that
// returned first.
func (b *Backend) observeWrite(key string, rev uint64, sent time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.seen[key]
	switch {
	case ok && o.rev == rev:
		if o.seen.Before(sent) {
			return
		}
		o.seen = sent
	case ok && rev < o.rev: // a later state was seen first
		if o.prevRev != rev || sent.Before(o.prevSeen) {
			o.prevRev, o.prevSeen = rev, sent
		}
	default:
		o = observation{rev: rev, seen: sent, prevRev: o.rev, prevSeen: o.seen}
	}
	b.seen[key] = o
}

// forget drops what the backend saw of key (its entry is gone).
func (b *Backend) forget(key string) {
	b.mu.Lock()
	delete(b.seen, key)
	b.mu.Unlock()
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
	case r.Held:
		if left := r.ttl() - s.since; left > 0 {
			s.live, s.remaining = true, left
		} else if left += r.delay(); left > 0 {
			s.delayed, s.remaining = true, left
		}
	case r.Forced && r.Delay > 0:
		if left := r.delay() - s.since; left > 0 {
			s.delayed, s.remaining = true, left
		}
	}
	return s
}
