package natsbackend

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/backend"
)

// NotifyFree watches key's entry (a KV watch on its one KV key, with no
// initial value) and wakes the subscriber when it is released,
// force-released, deleted or purged. An expiry writes nothing: a waiter
// learns it from the refused grant's HeldError.Remaining, as this backend
// observes it. The watch is an ordered consumer, which the client
// re-creates by itself after a reconnect or a gap; the subscriber is woken
// on every such re-creation in case an event fell in the gap.
func (b *Backend) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return nil, err
	}
	// The watch lives until Close; ctx bounds only its setting up.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	w, err := b.kv.Watch(wctx, kvKey(key), jetstream.UpdatesOnly())
	if !stop() {
		err = fmt.Errorf("natsbackend: watch %s: %w", kvKey(key), context.Cause(ctx))
		if w != nil {
			_ = w.Stop()
		}
	}
	if err != nil {
		cancel()
		return nil, readErr("watch "+kvKey(key), err)
	}
	s := &subscription{freed: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go s.run(wctx, w)
	return s, nil
}

type subscription struct {
	freed  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (s *subscription) Freed() <-chan struct{} { return s.freed }

func (s *subscription) Close() error {
	s.once.Do(func() {
		s.cancel()
		<-s.done
	})
	return nil
}

func (s *subscription) wake() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// run forwards w's updates until ctx ends; when the watch's channel closes
// (the client gave it up) it closes freed, so that the waiter falls back
// to polling.
func (s *subscription) run(ctx context.Context, w jetstream.KeyWatcher) {
	defer close(s.done)
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				close(s.freed)
				return
			}
			if e == nil { // the end of the initial values (none: UpdatesOnly)
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				s.wake()
				continue
			}
			// An empty entry is the one a key's first grant creates
			// before it writes the holder: no lease ended.
			r, err := parse(e.Value(), e.Revision())
			if err != nil || (!r.Held && len(e.Value()) > 0) {
				s.wake()
			}
		}
	}
}
