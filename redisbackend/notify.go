package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
)

// healthInterval is how long a pub/sub connection may stay silent before
// the backend pings it; a ping unanswered for as long again means the
// connection is dead, and the backend starts over on a new one.
const healthInterval = 15 * time.Second

// Backoff between attempts to reconnect a broken pub/sub connection.
const (
	minReconnectDelay = 10 * time.Millisecond
	maxReconnectDelay = time.Second
)

// NotifyFree implements backend.Notifier. A release (and a forced release)
// publishes on the key's channel, <prefix>{<base64url(key)>}:free, in the
// same script that ends the lease, and in the record's hash slot: PUBLISH
// on a standalone server or a Sentinel primary, SPUBLISH (Redis 7) on a
// Cluster, which keeps the message on the key's shard instead of
// broadcasting it to every node.
//
// NotifyFree returns when the server has confirmed the subscription, so a
// release after it returns is seen. Subscriptions share connections: one
// pub/sub connection per backend (per master on a Cluster) carries every
// key's channel, subscribed once however many waiters watch that key, and
// unsubscribed when the last of them closes. When that connection breaks,
// every subscription gets a wake-up and the backend subscribes again on a
// new connection, waking every subscription once more when the server
// confirms (a release in between may have been missed). Expiry publishes
// nothing. It works with a *redis.Client (standalone or Sentinel failover)
// and a *redis.ClusterClient; other clients get errors.ErrUnsupported.
//
// Backend.Close ends every subscription and closes its Freed channel.
func (b *Backend) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return nil, err
	}
	return b.notifier.subscribe(ctx, b.channel(key))
}

// notifier shares pub/sub connections among the backend's subscriptions.
// One mutex guards all of its state and its shards'.
type notifier struct {
	b      *Backend
	mu     sync.Mutex
	closed bool
	shards map[string]*shard // by master address ("" for a *redis.Client)
	wg     sync.WaitGroup    // the shards' reader goroutines
}

// shard is one pub/sub connection (a go-redis PubSub, which redials by
// itself) and the channels subscribed on it. Its reader goroutine receives
// confirmations and messages; only it replaces ps.
type shard struct {
	n        *notifier
	newPS    func(ctx context.Context, channels ...string) *redis.PubSub
	ps       *redis.PubSub
	channels map[string]*channel
	healthy  bool // received something since the last start-over
	ctx      context.Context
	cancel   context.CancelFunc // on Close
}

// channel is one key's channel on a shard and the subscriptions on it.
type channel struct {
	subs      map[*subscription]struct{}
	confirmed bool          // the server confirmed it on the current connection
	ready     chan struct{} // closed when confirmed
	rewake    bool          // wake subs when confirmed (after a start-over)
}

// subscription implements backend.Subscription.
type subscription struct {
	n     *notifier
	sh    *shard
	name  string
	freed chan struct{}
	once  sync.Once
}

// Freed implements backend.Subscription.
func (s *subscription) Freed() <-chan struct{} { return s.freed }

// Close implements backend.Subscription.
func (s *subscription) Close() error {
	s.once.Do(func() {
		s.n.mu.Lock()
		defer s.n.mu.Unlock()
		if s.n.closed {
			return
		}
		s.sh.drop(s)
	})
	return nil
}

func (s *subscription) wake() {
	select {
	case s.freed <- struct{}{}:
	default: // one is pending already
	}
}

// subscribe adds a subscription to the channel name and waits until the
// server has confirmed the channel, or ctx ends.
//
// Subscribing may dial a pub/sub connection and write to it, which go-redis
// bounds by its own dial and write timeouts, not by ctx: with a context
// that can end, that part runs on a goroutine of its own, which the caller
// stops waiting for when ctx ends (the goroutine then closes the
// subscription it made). The notifier's Close waits for it.
func (n *notifier) subscribe(ctx context.Context, name string) (backend.Subscription, error) {
	addr, newPS, err := n.route(ctx, name)
	if err != nil {
		return nil, err
	}
	var a added
	if ctx.Done() == nil {
		a = n.add(ctx, addr, newPS, name)
	} else if a, err = n.addDetached(ctx, addr, newPS, name); err != nil {
		return nil, err
	}
	if a.err != nil {
		return nil, a.err
	}
	select {
	case <-a.ready:
		return a.sub, nil
	case <-ctx.Done():
		_ = a.sub.Close()
		return nil, ctx.Err()
	case <-a.sub.sh.ctx.Done():
		return nil, backend.ErrClosed
	}
}

// added is what add did: the subscription and the channel's ready, or an
// error.
type added struct {
	sub   *subscription
	ready chan struct{}
	err   error
}

// addDetached runs add on a goroutine of its own and waits for it or for
// ctx to end; the error is ctx's when it ended first.
func (n *notifier) addDetached(ctx context.Context, addr string, newPS func(context.Context, ...string) *redis.PubSub, name string) (added, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return added{}, backend.ErrClosed
	}
	n.wg.Add(1) // under n.mu, which close takes before it waits
	n.mu.Unlock()
	var mu sync.Mutex
	gaveUp := false
	res := make(chan added, 1)
	go func() {
		defer n.wg.Done()
		a := n.add(ctx, addr, newPS, name)
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			if a.sub != nil {
				_ = a.sub.Close()
			}
			return
		}
		res <- a
	}()
	select {
	case a := <-res:
		return a, nil
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		gaveUp = true
		select {
		case a := <-res: // it came in meanwhile
			if a.sub != nil {
				_ = a.sub.Close()
			}
		default:
		}
		return added{}, ctx.Err()
	}
}

// add adds a subscription to the channel name on its shard, subscribing
// the channel when it is new.
func (n *notifier) add(ctx context.Context, addr string, newPS func(context.Context, ...string) *redis.PubSub, name string) added {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return added{err: backend.ErrClosed}
	}
	sh := n.shard(addr, newPS)
	sub := &subscription{n: n, sh: sh, name: name, freed: make(chan struct{}, 1)}
	ch := sh.channels[name]
	if ch == nil {
		ch = &channel{subs: make(map[*subscription]struct{}), ready: make(chan struct{})}
		sh.channels[name] = ch
		ch.subs[sub] = struct{}{}
		if err := sh.write(ctx, true, name); err != nil {
			delete(sh.channels, name)
			_ = sh.write(ctx, false, name) // forget it in the PubSub too
			return added{err: fmt.Errorf("redisbackend: subscribe: %w", err)}
		}
	} else {
		ch.subs[sub] = struct{}{}
	}
	return added{sub: sub, ready: ch.ready}
}

// route returns the address of the master that serves channel name ("" on
// a *redis.Client) and how to make a PubSub there.
func (n *notifier) route(ctx context.Context, name string) (string, func(context.Context, ...string) *redis.PubSub, error) {
	switch c := n.b.client.(type) {
	case *redis.Client:
		return "", c.Subscribe, nil
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, name)
		if err != nil {
			return "", nil, fmt.Errorf("redisbackend: subscribe: find the channel's master: %w", err)
		}
		return node.Options().Addr, c.SSubscribe, nil
	default:
		return "", nil, fmt.Errorf("redisbackend: NotifyFree needs a *redis.Client or *redis.ClusterClient, not %T: %w", c, errors.ErrUnsupported)
	}
}

// shard returns the shard for addr, starting it if need be. n.mu is held.
func (n *notifier) shard(addr string, newPS func(context.Context, ...string) *redis.PubSub) *shard {
	if sh := n.shards[addr]; sh != nil {
		return sh
	}
	if n.shards == nil {
		n.shards = make(map[string]*shard)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sh := &shard{n: n, newPS: newPS, channels: make(map[string]*channel), ctx: ctx, cancel: cancel}
	sh.ps = newPS(ctx)
	n.shards[addr] = sh
	n.wg.Add(1)
	go sh.read()
	return sh
}

// write sends SUBSCRIBE (or UNSUBSCRIBE, with subscribe false) for names,
// sharded on a Cluster. n.mu is held.
func (sh *shard) write(ctx context.Context, subscribe bool, names ...string) error {
	sharded := sh.n.b.publish == "spublish"
	switch {
	case subscribe && sharded:
		return sh.ps.SSubscribe(ctx, names...)
	case subscribe:
		return sh.ps.Subscribe(ctx, names...)
	case sharded:
		return sh.ps.SUnsubscribe(ctx, names...)
	default:
		return sh.ps.Unsubscribe(ctx, names...)
	}
}

// drop removes sub from its channel, and unsubscribes the channel when it
// was the last one. n.mu is held.
//
// A channel whose subscription the server has not confirmed yet stays
// subscribed until it is (read unsubscribes it then): its confirmation is
// still on the way, and it must not be taken for the confirmation of a
// later subscription to the same channel.
func (sh *shard) drop(sub *subscription) {
	ch := sh.channels[sub.name]
	if ch == nil {
		return
	}
	delete(ch.subs, sub)
	if len(ch.subs) == 0 && ch.confirmed {
		delete(sh.channels, sub.name)
		_ = sh.write(sh.ctx, false, sub.name) // a broken connection forgets it anyway
	}
}

// read is the shard's reader goroutine: it delivers confirmations and
// messages, and starts over on a new connection when the current one
// breaks or goes silent.
func (sh *shard) read() {
	defer sh.n.wg.Done()
	delay := minReconnectDelay
	pinged := false
	for {
		msg, err := sh.ps.ReceiveTimeout(sh.ctx, healthInterval)
		if sh.ctx.Err() != nil {
			return
		}
		if err != nil {
			var nerr net.Error
			if errors.As(err, &nerr) && nerr.Timeout() && !pinged {
				pinged = true
				_ = sh.ps.Ping(sh.ctx) // its reply, or the next timeout, tells
				continue
			}
			pinged = false
			if !sh.startOver() {
				return
			}
			select {
			case <-sh.ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, maxReconnectDelay)
			continue
		}
		pinged, delay = false, minReconnectDelay
		sh.deliver(msg)
	}
}

// deliver handles one message from the server.
func (sh *shard) deliver(msg any) {
	sh.n.mu.Lock()
	defer sh.n.mu.Unlock()
	sh.healthy = true
	switch m := msg.(type) {
	case *redis.Subscription:
		ch := sh.channels[m.Channel]
		if ch == nil || (m.Kind != "subscribe" && m.Kind != "ssubscribe") {
			return
		}
		if !ch.confirmed {
			ch.confirmed = true
			close(ch.ready)
		}
		if ch.rewake {
			ch.rewake = false
			for sub := range ch.subs {
				sub.wake()
			}
		}
		if len(ch.subs) == 0 { // its last waiter left before this
			delete(sh.channels, m.Channel)
			_ = sh.write(sh.ctx, false, m.Channel)
		}
	case *redis.Message:
		if ch := sh.channels[m.Channel]; ch != nil {
			for sub := range ch.subs {
				sub.wake()
			}
		}
	}
}

// startOver replaces a broken connection with a new one that subscribes
// every channel again, and wakes every subscription (a release may have
// gone unseen) when the shard had been healthy; each is woken again when
// the server confirms its channel. It reports false after Close.
func (sh *shard) startOver() bool {
	sh.n.mu.Lock()
	defer sh.n.mu.Unlock()
	if sh.n.closed {
		return false
	}
	_ = sh.ps.Close()
	sh.ps = sh.newPS(sh.ctx)
	wake := sh.healthy
	sh.healthy = false
	for _, ch := range sh.channels {
		if ch.confirmed {
			ch.confirmed = false
			ch.ready = make(chan struct{})
		}
		ch.rewake = true
		if wake {
			for sub := range ch.subs {
				sub.wake()
			}
		}
	}
	if len(sh.channels) > 0 {
		// An error (the server is down) leaves the channels in the PubSub,
		// which subscribes them when the reader's next receive dials.
		_ = sh.write(sh.ctx, true, slices.Collect(maps.Keys(sh.channels))...)
	}
	return true
}

// close ends every shard and subscription and waits for the readers.
func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	for _, sh := range n.shards {
		sh.cancel()
		_ = sh.ps.Close()
		for _, ch := range sh.channels {
			for sub := range ch.subs {
				close(sub.freed)
			}
		}
	}
	n.mu.Unlock()
	n.wg.Wait()
}
