package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
)

// NotifyFree implements backend.Notifier with an etcd watch on the key's
// lease record and delay record that reports their deletions: a release, a
// forced release and the revoke of an expired lease delete the lease
// record, and the end of a lock delay the delay record (its etcd lease's
// revoke). It returns once etcd has created the watch, so every deletion
// after that is reported.
//
// Every subscription of a backend shares the backend's one watch stream (a
// gRPC stream that multiplexes etcd watches), so a subscription costs one
// server-side watcher, not a connection. The watches require a leader: a
// member that loses its leader ends them, and the subscription sends a
// wake-up and watches again from the revision after the last one it saw,
// missing nothing, with a growing pause while that fails. After a
// compaction past that revision it wakes the waiter and watches from the
// oldest revision left, so a deletion after the compaction is not missed.
// The channel is closed when the backend or the etcd client is closed.
func (b *Backend) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return nil, err
	}
	if err := b.addSub(); err != nil {
		return nil, err
	}

	k := b.keys(key)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(b.ctx))
	s := &subscription{
		b:      b,
		from:   k.delay,
		end:    k.lease + "\x00",
		freed:  make(chan struct{}, 1),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	// Watch blocks until the watch stream takes the request, which may
	// wait for a connection: ctx bounds the set-up by ending the watch.
	stop := context.AfterFunc(ctx, cancel)
	wch := s.watch(wctx, 0, clientv3.WithCreatedNotify())
	rev, err := b.created(ctx, wch)
	if !stop() && err == nil {
		err = ctx.Err() // the watch is being ended
	}
	if err != nil {
		cancel()
		close(s.done)
		b.subs.Done()
		return nil, err
	}
	go s.run(wctx, wch, rev)
	return s, nil
}

// subscription is a watch set up by NotifyFree.
type subscription struct {
	b      *Backend
	from   string // the watched range of etcd keys: [from, end), the delay record
	end    string // to the lease record (the ID record between them is deleted only by a reclaim, which wakes a waiter for nothing)
	freed  chan struct{}
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	events atomic.Int64  // deletions reported (tests: tells them from wake-ups of a broken watch)
}

// Freed implements backend.Subscription.
func (s *subscription) Freed() <-chan struct{} { return s.freed }

// Close implements backend.Subscription: it ends the watch and waits for its
// goroutine.
func (s *subscription) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// watch watches the deletions of the records in [s.from, s.end) from
// revision rev (0: from now).
func (s *subscription) watch(ctx context.Context, rev int64, opts ...clientv3.OpOption) clientv3.WatchChan {
	opts = append(opts, clientv3.WithRange(s.end), clientv3.WithFilterPut())
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	return s.b.watcher.Watch(ctx, s.from, opts...)
}

// created waits for the watch's created response and returns its revision.
func (b *Backend) created(ctx context.Context, wch clientv3.WatchChan) (int64, error) {
	select {
	case resp, ok := <-wch:
		switch {
		case !ok:
			if err := b.ready(ctx, nil); err != nil {
				return 0, err
			}
			return 0, errors.New("etcdbackend: watch: closed before it was created")
		case resp.Err() != nil:
			return 0, fmt.Errorf("etcdbackend: watch: %w", resp.Err())
		case !resp.Created:
			return 0, errors.New("etcdbackend: watch: no created response")
		}
		return resp.Header.Revision, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Pauses between attempts to watch again while watches keep breaking.
const (
	minRewatchPause = 10 * time.Millisecond
	maxRewatchPause = time.Second
)

// run reports the watch's deletions on freed until ctx ends or the client
// closes, watching again whenever the watch breaks. rev is the revision up
// to which the watch has reported every deletion.
func (s *subscription) run(ctx context.Context, wch clientv3.WatchChan, rev int64) {
	defer s.b.subs.Done()
	defer close(s.done)
	defer close(s.freed)
	pause := minRewatchPause
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-wch:
			if ok && resp.Err() == nil {
				pause = minRewatchPause
				// Resume after the last event, not after the header's
				// revision: a response's header may run ahead of events
				// still to come.
				for _, ev := range resp.Events {
					rev = max(rev, ev.Kv.ModRevision)
				}
				if resp.IsProgressNotify() {
					rev = max(rev, resp.Header.Revision)
				}
				if len(resp.Events) > 0 {
					s.events.Add(int64(len(resp.Events)))
					s.wake()
				}
				continue
			}
			// Broken: by ctx's end (Close: the watch channel can close
			// before the select above sees ctx.Done, and a subscription
			// that is closing wakes no one), by a compaction (resume from
			// the oldest revision left: deletions before it may have been
			// missed, none after), a lost leader or a closed stream (resume
			// after rev: none missed). Wake the waiter but for the first.
			if ctx.Err() != nil {
				return
			}
			s.wake()
			next := rev + 1
			if ok && resp.CompactRevision > 0 {
				next = resp.CompactRevision
			}
			if s.b.cli.Ctx().Err() != nil {
				return // the client is closed: no watch can go on
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, maxRewatchPause)
			wch = s.watch(ctx, next)
		}
	}
}

// wake sends a wake-up unless one is pending.
func (s *subscription) wake() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// addSub counts a new watch (a NotifyFree or NotifyTurn subscription) that
// Close waits for, unless the backend is closed.
func (b *Backend) addSub() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return backend.ErrClosed
	}
	b.subs.Add(1)
	return nil
}
