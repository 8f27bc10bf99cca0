package kubebackend

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fencing-go/fencing/backend"
)

// NotifyFree watches key's Lease (a watch on one object name) and wakes the
// subscriber when it is released, force-released or deleted. An expiry is
// no event on the API server: a waiter learns it from the refused grant's
// HeldError.Remaining, as this backend observes it. When the watch ends (the
// API server closes watches now and then) it is opened again from the last
// resourceVersion seen, with a wake-up in between in case an event fell in
// the gap.
func (b *Backend) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return nil, err
	}
	name := LeaseName(key)
	// The watch lives until Close; ctx bounds only its setting up.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	w, err := b.watch(wctx, name, "")
	if !stop() {
		err = fmt.Errorf("kubebackend: watch Lease %s: %w", name, context.Cause(ctx))
		if w != nil {
			w.Stop()
		}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s := &subscription{freed: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go s.run(wctx, b, name, w)
	return s, nil
}

func (b *Backend) watch(ctx context.Context, name, rv string) (watch.Interface, error) {
	w, err := b.leases.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: rv,
	})
	if err != nil {
		return nil, readErr("watch Lease "+name, err)
	}
	return w, nil
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

// run forwards w's events until ctx ends, reopening the watch when it
// closes; when it cannot be reopened it closes freed, so that the waiter
// falls back to polling.
func (s *subscription) run(ctx context.Context, b *Backend, name string, w watch.Interface) {
	defer close(s.done)
	rv := ""
	for {
		if !s.forward(ctx, w, &rv) {
			w.Stop()
			return
		}
		w.Stop()
		s.wake()
		var err error
		for try := 0; ; try++ {
			if w, err = b.watch(ctx, name, rv); err == nil {
				break
			}
			if ctx.Err() != nil || try == 5 {
				close(s.freed)
				return
			}
			t := time.NewTimer(time.Duration(try+1) * 100 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
}

// forward reads w until it closes (true) or ctx ends (false).
func (s *subscription) forward(ctx context.Context, w watch.Interface, rv *string) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-w.ResultChan():
			if !ok {
				return true
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if isLease {
				*rv = l.ResourceVersion
			}
			switch {
			case ev.Type == watch.Deleted:
				s.wake()
			case ev.Type == watch.Error:
				*rv = "" // too old: start from now
				return true
			case isLease && (l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""):
				s.wake()
			}
		}
	}
}
