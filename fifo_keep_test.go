package fencing_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/heldtest"
	"github.com/fencing-go/fencing/memorybackend"
)

// slowRenewal is one process's connection to a shared memory backend whose
// first Enqueue after the waiter reached the head of the line (its first
// Inspect) gets no answer until its context ends: one slow renewal of the
// entry, as on a loaded store. It records the places its Enqueues returned.
type slowRenewal struct {
	*memorybackend.Backend
	mu     sync.Mutex
	atHead bool
	hung   bool
	places []backend.Place
}

func (s *slowRenewal) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	s.mu.Lock()
	s.atHead = true
	s.mu.Unlock()
	return s.Backend.Inspect(ctx, key)
}

func (s *slowRenewal) Enqueue(ctx context.Context, key, waiter string, ttl time.Duration) (backend.Place, error) {
	s.mu.Lock()
	hang := s.atHead && !s.hung
	s.hung = s.hung || hang
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return backend.Place{}, ctx.Err()
	}
	p, err := s.Backend.Enqueue(ctx, key, waiter, ttl)
	if err == nil {
		s.mu.Lock()
		s.places = append(s.places, p)
		s.mu.Unlock()
	}
	return p, err
}

func (s *slowRenewal) hangDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hung
}

// One renewal of a waiter's entry that gets no answer within its bound (a
// third of the TTL) is retried at once, not a third of the TTL later, when
// the entry would have expired: the waiter at the head keeps its place
// ahead of the one behind it, and gets the key first.
func TestLockFIFOSlowEntryRenewalKeepsPlace(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 600 * time.Millisecond
	holder, err := fencing.New(mem).Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	first := &slowRenewal{Backend: mem}
	opts := []fencing.LockOption{fencing.WithFIFO(), fencing.WithPollInterval(30 * time.Second)}
	lock := func(b backend.Backend) <-chan heldtest.LockResult {
		ch := make(chan heldtest.LockResult, 1)
		go func() {
			h, err := fencing.New(b).Lock(ctx, "k", ttl, opts...)
			ch <- heldtest.LockResult{Held: h, Err: err, At: time.Now()}
		}()
		return ch
	}
	a := lock(first)
	waitFor(t, 10*time.Second, "the first waiter at the head", func() bool {
		first.mu.Lock()
		defer first.mu.Unlock()
		return first.atHead
	})
	joinedBefore := time.Now()
	second := &slowRenewal{Backend: mem, hung: true} // never slow
	b := lock(second)
	waitFor(t, 10*time.Second, "the second waiter in line", func() bool {
		second.mu.Lock()
		defer second.mu.Unlock()
		return len(second.places) > 0
	})
	// Past the slow renewal, and a TTL past the first waiter's join.
	waitFor(t, 10*time.Second, "the slow renewal", first.hangDone)
	time.Sleep(time.Until(joinedBefore.Add(ttl + ttl/3)))
	if err := fencing.New(mem).Release(ctx, "k", holder.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-a:
		if r.Err != nil {
			t.Fatalf("first waiter: %v", r.Err)
		}
		r.Held.Release(ctx)
	case r := <-b:
		if r.Held != nil {
			r.Held.Release(ctx)
		}
		first.mu.Lock()
		defer first.mu.Unlock()
		t.Fatalf("the waiter behind got the key first (%v); the first waiter's places %+v", r.Err, first.places)
	}
	if r := heldtest.Result(t, b, "second waiter"); r.Err == nil {
		r.Held.Release(ctx)
	}
}

// queuedRenewal is a connection to a memory backend whose Enqueues, once
// the waiter reached the head of the line (its first Inspect), each wait
// half the entry's TTL before they are served, or until their context ends
// (then they did nothing): calls queued behind others on a loaded store,
// as in one SQLite backend's queue of transactions.
type queuedRenewal struct {
	*memorybackend.Backend
	atHead  sync.Once
	delayed chan struct{} // closed at the first Inspect
	served  atomic.Int64  // Enqueues served after the delay
}

func (q *queuedRenewal) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	q.atHead.Do(func() { close(q.delayed) })
	return q.Backend.Inspect(ctx, key)
}

func (q *queuedRenewal) Enqueue(ctx context.Context, key, waiter string, ttl time.Duration) (backend.Place, error) {
	select {
	case <-q.delayed:
		t := time.NewTimer(ttl / 2)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return backend.Place{}, ctx.Err()
		case <-t.C:
			q.served.Add(1)
		}
	default:
	}
	return q.Backend.Enqueue(ctx, key, waiter, ttl)
}

// The keeper of the entry at the head of the line (no other call renews it
// while the waiter waits for the holder) keeps it when every renewal waits
// in the store's queue for longer than a third of the TTL: it does not give
// an attempt up, and join the back of the queue again, before the entry
// could have expired.
func TestLockFIFOQueuedEntryRenewalKeepsPlace(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 900 * time.Millisecond
	holder, err := fencing.New(mem).Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	q := &queuedRenewal{Backend: mem, delayed: make(chan struct{})}
	got := make(chan heldtest.LockResult, 1)
	go func() {
		h, err := fencing.New(q).Lock(ctx, "k", ttl, fencing.WithFIFO(), fencing.WithPollInterval(30*time.Second))
		got <- heldtest.LockResult{Held: h, Err: err, At: time.Now()}
	}()
	<-q.delayed
	// Three TTLs at the head, its entry renewed only through the queue.
	time.Sleep(3 * ttl)
	probe, err := mem.Enqueue(ctx, "k", "probe", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	served := q.served.Load()
	if err := mem.Dequeue(ctx, "k", "probe"); err != nil {
		t.Fatal(err)
	}
	if err := fencing.New(mem).Release(ctx, "k", holder.ID); err != nil {
		t.Fatal(err)
	}
	r := heldtest.Result(t, got, "the waiter")
	if r.Err != nil {
		t.Fatalf("Lock: %v", r.Err)
	}
	r.Held.Release(ctx)
	if probe.Ahead != 1 {
		t.Fatalf("after 3 TTLs at the head with renewals served %v after their send, a newcomer joined at %+v, want behind the waiter (Ahead 1); %d renewals were served",
			ttl/2, probe, served)
	}
}
