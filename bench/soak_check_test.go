package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// soakCheck holds the soak's online invariant checks for one backend, and
// the recent history that a breach prints.
//
// Tokens: for every key it keeps the highest token a grant returned. A grant
// takes a snapshot of that before it starts; every grant that returned before
// the snapshot was taken finished before this one began, so its token must
// be lower: the returned token must exceed the snapshot (strictly increasing,
// never reissued).
//
// Holders: every write goes through a guard (guard.Memory) whose write
// function reports to the shadow fence here, the highest token of each
// resource whose Admit returned or whose write ran. A write function that
// runs with a token below the shadow fence is a stale write the guard let
// land: at that moment a newer holder had already been admitted, so two
// holders' writes interleaved.
type soakCheck struct {
	cancel context.CancelCauseFunc // ends the run at the first breach

	mu       sync.Mutex
	granted  map[string]uint64 // key -> highest token a grant returned
	fence    map[string]uint64 // resource -> highest token admitted (shadow of the guard)
	breaches []string
	history  []string // ring of the last soakHistory events
	next     int
	start    time.Time

	staleAdmitted, staleRefused, tokenBreaches, writes int64
}

// soakHistory is how many recent events a breach prints.
const soakHistory = 400

func newSoakCheck(cancel context.CancelCauseFunc) *soakCheck {
	return &soakCheck{
		cancel:  cancel,
		granted: make(map[string]uint64),
		fence:   make(map[string]uint64),
		history: make([]string, 0, soakHistory),
		start:   time.Now(),
	}
}

// event adds a line to the history; mu is held.
func (c *soakCheck) eventLocked(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", time.Since(c.start).Seconds()) + fmt.Sprintf(format, args...)
	if len(c.history) < soakHistory {
		c.history = append(c.history, line)
		return
	}
	c.history[c.next] = line
	c.next = (c.next + 1) % soakHistory
}

// event adds a line to the history.
func (c *soakCheck) event(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eventLocked(format, args...)
}

// breachLocked records a breach and ends the run; mu is held.
func (c *soakCheck) breachLocked(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.eventLocked("BREACH %s", msg)
	c.breaches = append(c.breaches, msg)
	c.cancel(fmt.Errorf("invariant breached: %s", msg))
}

// before returns the snapshot a grant on key takes before it starts.
func (c *soakCheck) before(key string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.granted[key]
}

// grant checks the token a grant on key returned against the snapshot it
// took before it started, by op.
func (c *soakCheck) grant(op, key string, snapshot, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eventLocked("%s grant %s token %d (before: %d)", op, key, token, snapshot)
	if token <= snapshot {
		c.tokenBreaches++
		c.breachLocked("%s on %s returned token %d, not above %d, which a grant that ended before it began returned", op, key, token, snapshot)
	}
	c.granted[key] = max(c.granted[key], token)
}

// childGrant records the token of a grant the child process reported,
// read from its output after the grant returned (so later grants must
// exceed it), and checks it against the child's previous grant's token
// (its grants are sequential).
func (c *soakCheck) childGrant(key string, previous, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eventLocked("child grant %s token %d (its previous: %d)", key, token, previous)
	if token <= previous {
		c.tokenBreaches++
		c.breachLocked("the child process's grant on %s returned token %d, not above its previous grant's %d", key, token, previous)
	}
	c.granted[key] = max(c.granted[key], token)
}

// admitted records that the guard admitted token on resource (Admit
// returned nil).
func (c *soakCheck) admitted(resource string, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fence[resource] = max(c.fence[resource], token)
}

// write is the body of every guarded write: it runs inside the guard's
// atomic step, after the guard admitted token.
func (c *soakCheck) write(op, resource string, token uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	if f := c.fence[resource]; token < f {
		c.staleAdmitted++
		c.breachLocked("%s: the guard let a write with token %d land on %s after token %d was admitted", op, token, resource, f)
		return nil
	}
	c.fence[resource] = token
	return nil
}

// refused counts a write or Admit the guard refused as stale.
func (c *soakCheck) refused(op, resource string, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.staleRefused++
	c.eventLocked("%s: guard refused token %d on %s (fence %d)", op, token, resource, c.fence[resource])
}

// report returns the breaches and the history, oldest first.
func (c *soakCheck) report() (breaches []string, history string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := append(append([]string(nil), c.history[c.next:]...), c.history[:c.next]...)
	return append([]string(nil), c.breaches...), strings.Join(h, "\n")
}
