package sqlbackend

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencing-go/fencing/backend"
)

// How NotifyFree learns that a key may be free, by dialect:
//
//   - PostgreSQL with WithListener: one session LISTENs on the backend's
//     channels; the release and force_release functions NOTIFY with the key
//     when they commit, the dequeue function with the key and the tag of
//     the waiter behind the leaver (queue.go). A broken session wakes every
//     subscription and is re-opened.
//   - PostgreSQL without it: one goroutine per Backend asks every
//     serverPoll, in one statement for all subscribed keys, which of
//     them are free.
//   - SQLite: the same every sqlitePoll, one read of a key's row per
//     subscribed key, outside any transaction (a hint: the waiter's grant
//     decides). A waiter learns of a release in another process within
//     about sqlitePoll.
//   - MySQL: the same every serverPoll, one read of a key's row (and of
//     the server's clock) per subscribed key.
//
// Releases through this Backend wake its subscriptions at once on both.
const (
	serverPoll    = 100 * time.Millisecond
	sqlitePoll    = 10 * time.Millisecond
	reconnectWait = 200 * time.Millisecond
	// listenConnectTimeout bounds opening and setting up the listener
	// session.
	listenConnectTimeout = 5 * time.Second
	// listenLinger is how long the listener session stays open after its
	// last subscription closed, so that a Lock shortly after another does
	// not open a session of its own (a connection: milliseconds).
	listenLinger = time.Second
)

// subscription is a watch of NotifyFree or, with turn set, of NotifyTurn.
type subscription struct {
	h     *hub
	key   string
	freed chan struct{}
	once  sync.Once

	// NotifyTurn's: the waiter, its tag (turnTag) and, guarded by the
	// hub's mutex, what the poll saw last of its place (see queue.go).
	turn     bool
	waiterID string
	tag      string
	seen     int64
	telling  int       // Enqueues and Dequeues of the waiter under way
	toldAt   time.Time // when the latest of them ended
}

func (s *subscription) Freed() <-chan struct{} { return s.freed }

func (s *subscription) Close() error {
	s.once.Do(func() { s.h.remove(s) })
	return nil
}

func (s *subscription) wake() {
	select {
	case s.freed <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// hub holds the subscriptions of one Backend and the goroutine that watches
// for them; the goroutine runs while there are subscriptions and, with a
// listener session, for listenLinger after the last one (Close ends it).
type hub struct {
	b       *Backend
	mu      sync.Mutex
	subs    map[string]map[*subscription]struct{} // NotifyFree's, by key
	turns   map[string]map[*subscription]struct{} // NotifyTurn's, by key
	n       int
	closed  bool
	stop    context.CancelFunc
	done    chan struct{}
	readyCh chan struct{}
	idle    *time.Timer // ends a lingering listener (stopIdle)
}

// NotifyFree implements backend.Notifier (see the package documentation for
// how each dialect learns of a release).
func (b *Backend) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return nil, err
	}
	sub := &subscription{h: &b.hub, key: key, freed: make(chan struct{}, 1)}
	ready := b.hub.add(sub)
	select {
	case <-ready:
	case <-ctx.Done():
		sub.Close()
		return nil, ctx.Err()
	}
	return sub, nil
}

// add registers sub and returns a channel closed once the watch is in
// place.
func (h *hub) add(sub *subscription) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed { // Close came first: a closed channel, and no goroutine
		close(sub.freed)
		return closedCh
	}
	m := &h.subs
	if sub.turn {
		m = &h.turns
	}
	if *m == nil {
		*m = make(map[string]map[*subscription]struct{})
	}
	set := (*m)[sub.key]
	if set == nil {
		set = make(map[*subscription]struct{})
		(*m)[sub.key] = set
	}
	set[sub] = struct{}{}
	h.n++
	if h.idle != nil { // a lingering listener serves again
		h.idle.Stop() // (if stopIdle runs already, it sees this subscription)
		h.idle = nil
	}
	if h.n == 1 && h.done == nil {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan struct{})
		h.stop, h.done = cancel, make(chan struct{})
		go h.watch(ctx, ready, h.done)
		h.readyCh = ready
	}
	return h.readyCh
}

func (h *hub) remove(sub *subscription) {
	h.mu.Lock()
	m := h.subs
	if sub.turn {
		m = h.turns
	}
	if set := m[sub.key]; set != nil {
		if _, ok := set[sub]; ok {
			delete(set, sub)
			h.n--
			if len(set) == 0 {
				delete(m, sub.key)
			}
		}
	}
	var done chan struct{}
	switch {
	case h.n > 0 || h.done == nil:
	case h.b.listenDSN != "":
		if h.idle == nil {
			h.idle = time.AfterFunc(listenLinger, h.stopIdle)
		}
	default:
		h.stop()
		done, h.done = h.done, nil
	}
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

// stopIdle ends the listener goroutine if no subscription came since the
// last one closed.
func (h *hub) stopIdle() {
	h.mu.Lock()
	if h.n > 0 || h.done == nil {
		h.mu.Unlock()
		return
	}
	h.stop()
	done := h.done
	h.done, h.idle = nil, nil
	h.mu.Unlock()
	<-done
}

// close ends the watch and every subscription (Backend.Close).
func (h *hub) close() {
	h.mu.Lock()
	var done chan struct{}
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.done != nil {
		h.stop()
		done, h.done = h.done, nil
	}
	for _, m := range []map[string]map[*subscription]struct{}{h.subs, h.turns} {
		for _, set := range m {
			for sub := range set {
				close(sub.freed)
			}
		}
	}
	h.subs, h.turns, h.n, h.closed = nil, nil, 0, true
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

// wakeKey wakes key's subscriptions.
func (h *hub) wakeKey(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs[key] {
		sub.wake()
	}
}

// wakeAll wakes every subscription.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range []map[string]map[*subscription]struct{}{h.subs, h.turns} {
		for _, set := range m {
			for sub := range set {
				sub.wake()
			}
		}
	}
}

func (h *hub) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.subs))
	for k := range h.subs {
		keys = append(keys, k)
	}
	return keys
}

// watch runs until ctx ends.
func (h *hub) watch(ctx context.Context, ready chan struct{}, done chan struct{}) {
	defer close(done)
	var once sync.Once
	setReady := func() { once.Do(func() { close(ready) }) }
	defer setReady()
	if h.b.listenDSN != "" {
		h.listen(ctx, setReady)
		return
	}
	h.poll(ctx, setReady, h.b.dialect.pollInterval())
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// poll asks, every interval, which of the subscribed keys are free, and
// wakes their subscriptions; it asks after the lines too (pollTurns). A key
// in a lock delay is not free: it wakes when the delay ends. A key whose
// live lease has another token than at the poll before was freed in between
// (a release and the next grant between two polls), so it wakes too: a
// poll never hides a release. It takes a connection of the pool only for
// each read, so a pool of one connection still serves the operations.
func (h *hub) poll(ctx context.Context, setReady func(), interval time.Duration) {
	setReady()                  // the first poll is the watch: a release after now is seen by it
	seen := map[string]uint64{} // a key's live token at the poll before
	for sleepCtx(ctx, interval) {
		h.pollTurns(ctx)
		keys := h.keys()
		if len(keys) == 0 {
			clear(seen)
			continue
		}
		states, err := h.b.dialect.liveTokens(ctx, keys)
		if err != nil {
			h.wakeAll() // the waiters find out for themselves
			continue
		}
		for _, k := range keys {
			token, live := states[k]
			if before, ok := seen[k]; !live || ok && before != token {
				h.wakeKey(k)
			}
			if live {
				seen[k] = token
			} else {
				delete(seen, k)
			}
		}
	}
}

// listen keeps one LISTEN session open.
func (h *hub) listen(ctx context.Context, setReady func()) {
	for ctx.Err() == nil {
		// Bounded, so that a server that does not answer holds up no
		// NotifyFree for long: its waiter polls meanwhile.
		cctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
		conn, err := pgx.Connect(cctx, h.b.listenDSN)
		if err == nil {
			// The lock says that someone listens (pglisten.go): held while
			// the session is open.
			_, err = conn.Exec(cctx, "SELECT pg_advisory_lock_shared("+listeningLock(h.b.sql.notifyChannel)+")")
			for _, ch := range []string{h.b.sql.notifyChannel, h.b.sql.turnChannel} {
				if err == nil {
					_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{ch}.Sanitize())
				}
			}
		}
		cancel()
		if err != nil {
			if conn != nil {
				conn.Close(context.WithoutCancel(ctx))
			}
			setReady() // a waiter is not held up: it polls meanwhile
			h.wakeAll()
			sleepCtx(ctx, reconnectWait)
			continue
		}
		setReady()
		h.wakeAll() // anything may have happened while no session listened
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			if n.Channel == h.b.sql.turnChannel {
				hexKey, tag, _ := strings.Cut(n.Payload, ":")
				if key, err := hex.DecodeString(hexKey); err == nil {
					h.wakeTurn(string(key), tag)
				}
			} else if key, err := hex.DecodeString(n.Payload); err == nil {
				h.wakeKey(string(key))
			}
		}
		conn.Close(context.WithoutCancel(ctx))
		h.wakeAll()
		sleepCtx(ctx, reconnectWait)
	}
}

// closedCh is a closed channel.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
