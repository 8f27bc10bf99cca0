package fencing_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
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
	lock := func(b backend.Backend) <-chan lockResult {
		ch := make(chan lockResult, 1)
		go func() {
			h, err := fencing.New(b).Lock(ctx, "k", ttl, opts...)
			ch <- lockResult{h, err, time.Now()}
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
		if r.err != nil {
			t.Fatalf("first waiter: %v", r.err)
		}
		r.h.Release(ctx)
	case r := <-b:
		if r.h != nil {
			r.h.Release(ctx)
		}
		first.mu.Lock()
		defer first.mu.Unlock()
		t.Fatalf("the waiter behind got the key first (%v); the first waiter's places %+v", r.err, first.places)
	}
	if r := result(t, b, "second waiter"); r.err == nil {
		r.h.Release(ctx)
	}
}
