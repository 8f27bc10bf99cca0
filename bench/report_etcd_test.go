package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/etcdbackend"
)

// etcdTTL is long enough that no lease or session expires during the report.
const etcdTTL = time.Minute

// etcdSection compares the etcd backend, called through fencing.Coordinator,
// with etcd's own lock (clientv3/concurrency.Mutex) on a Session made for
// each lock and on one shared Session, and with the floors any etcd lock
// pays: one Txn (a raft proposal) and one linearizable Get (a leader
// ReadIndex). All on one embedded single-member etcd in this process
// (TickMs 10, ElectionMs 100), fsync off unless the row says on, with one
// client shared by every contender. Then the handoff: how soon a waiting
// Lock returns after its holder released, against a waiting Mutex.Lock.
func etcdSection(t *testing.T, r *report) {
	cli := startEtcd(t, false)
	for _, g := range []int{1, 32} {
		r.compare(t, &comparison{
			store: "etcd", op: "Grant+Release vs Mutex, Session per lock", goroutines: g,
			contenders: []contender{
				etcdOurs(t, cli), etcdMutexFreshSession(cli), etcdTxnFloor(cli), etcdGetFloor(cli),
			},
		})
		r.compare(t, &comparison{
			store: "etcd", op: "Grant+Release vs Mutex, one shared Session", goroutines: g,
			contenders: []contender{etcdOurs(t, cli), etcdMutexSharedSession(t, cli)},
		})
	}
	for _, g := range []int{1, 32} {
		r.compare(t, &comparison{
			store: "etcd", op: "CheckToken vs linearizable Get", goroutines: g,
			contenders: []contender{etcdCheckToken(t, cli, g), etcdGetFloor(cli)},
		})
	}
	r.notes = append(r.notes, etcdHandoff(t, cli, 3*r.rounds))

	// Rows with fsync on, on a server of its own: etcd's default, as users
	// run it.
	synced := startEtcd(t, true)
	r.compare(t, &comparison{
		store: "etcd, fsync on", op: "Grant+Release vs Mutex, Session per lock", goroutines: 1,
		contenders: []contender{etcdOurs(t, synced), etcdMutexFreshSession(synced), etcdTxnFloor(synced)},
	})
	for _, g := range []int{1, 32} {
		r.compare(t, &comparison{
			store: "etcd, fsync on", op: "Grant+Release vs Mutex, one shared Session", goroutines: g,
			contenders: []contender{etcdOurs(t, synced), etcdMutexSharedSession(t, synced)},
		})
	}
	r.notes = append(r.notes, "etcd rows: one embedded etcd member in the test process (TickMs 10, ElectionMs 100, "+
		"UnsafeNoFsync: fsync **off**, except the rows marked fsync on), one client for all contenders, "+
		"loopback; CPU ns/op includes the server's, which runs in this process. Floors: `txn` is one Txn "+
		"(one Put: a raft proposal), `get` one linearizable Get (a ReadIndex, no proposal).")
}

// startEtcd starts an embedded single-member etcd and returns a client of
// it; both stop in t's cleanup.
func startEtcd(t *testing.T, fsync bool) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = t.TempDir()
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = !fsync
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	clientURL, peerURL := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("etcd not ready after 20s")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{clientURL.String()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func freeURL(t *testing.T) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

// etcdPrefix returns a key prefix no other contender uses.
func etcdPrefix(what string) string {
	return fmt.Sprintf("bench/%s/%d/", what, rand.Uint64())
}

func etcdCoordinator(t *testing.T, cli *clientv3.Client) *fencing.Coordinator {
	t.Helper()
	b, err := etcdbackend.New(context.Background(), cli, etcdbackend.WithPrefix(etcdPrefix("fencing")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return fencing.New(b)
}

// etcdOurs is a Grant and a Release through fencing.Coordinator, each
// goroutine on a key of its own.
func etcdOurs(t *testing.T, cli *clientv3.Client) contender {
	c := etcdCoordinator(t, cli)
	ctx := context.Background()
	return contender{name: "ours", worker: func(w int) func(int) error {
		key := fmt.Sprint("k", w)
		return func(int) error {
			l, err := c.Grant(ctx, key, etcdTTL)
			if err != nil {
				return err
			}
			return c.Release(ctx, key, l.ID)
		}
	}}
}

// etcdMutexFreshSession is a lock of its own lifetime with etcd's Mutex: a
// Session (its etcd lease, with the Session's keep-alive) made for the lock,
// Lock, Unlock, and the Session's Close (which revokes its lease).
func etcdMutexFreshSession(cli *clientv3.Client) contender {
	ctx := context.Background()
	prefix := etcdPrefix("mutex-fresh")
	return contender{name: "Mutex, Session per lock", worker: func(w int) func(int) error {
		key := fmt.Sprint(prefix, "k", w)
		return func(int) error {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(etcdTTL/time.Second)))
			if err != nil {
				return err
			}
			if err := lockUnlock(ctx, concurrency.NewMutex(s, key)); err != nil {
				s.Close()
				return err
			}
			return s.Close()
		}
	}}
}

// etcdMutexSharedSession is etcd's Mutex on one Session that every lock of
// every goroutine shares: no etcd lease per lock.
func etcdMutexSharedSession(t *testing.T, cli *clientv3.Client) contender {
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(etcdTTL/time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	prefix := etcdPrefix("mutex-shared")
	return contender{name: "Mutex, one shared Session", worker: func(w int) func(int) error {
		key := fmt.Sprint(prefix, "k", w)
		return func(int) error { return lockUnlock(ctx, concurrency.NewMutex(s, key)) }
	}}
}

func lockUnlock(ctx context.Context, m *concurrency.Mutex) error {
	if err := m.Lock(ctx); err != nil {
		return err
	}
	return m.Unlock(ctx)
}

// etcdTxnFloor is one Txn with one Put: one raft proposal.
func etcdTxnFloor(cli *clientv3.Client) contender {
	ctx := context.Background()
	prefix := etcdPrefix("txn")
	return contender{name: "txn (1 proposal)", worker: func(w int) func(int) error {
		key := fmt.Sprint(prefix, "k", w)
		return func(int) error {
			_, err := cli.Txn(ctx).Then(clientv3.OpPut(key, "v")).Commit()
			return err
		}
	}}
}

// etcdGetFloor is one linearizable Get of a key that exists.
func etcdGetFloor(cli *clientv3.Client) contender {
	ctx := context.Background()
	key := etcdPrefix("get") + "k"
	return contender{name: "get (linearizable)", worker: func(int) func(int) error {
		if _, err := cli.Put(ctx, key, "v"); err != nil {
			return func(int) error { return err }
		}
		return func(int) error {
			_, err := cli.Get(ctx, key)
			return err
		}
	}}
}

// etcdCheckToken checks the token of a held lease, each goroutine its own.
func etcdCheckToken(t *testing.T, cli *clientv3.Client, g int) contender {
	c := etcdCoordinator(t, cli)
	ctx := context.Background()
	leases := make([]fencing.Lease, g)
	for w := range leases {
		l, err := c.Grant(ctx, fmt.Sprint("held", w), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		leases[w] = l
	}
	return contender{name: "ours", worker: func(w int) func(int) error {
		l := leases[w]
		return func(int) error {
			_, err := c.CheckToken(ctx, l.Key, l.Token)
			return err
		}
	}}
}

// etcdHandoff measures rounds handoffs of each kind, in a shuffled order each
// round: fencing's Held.Release to a waiting Coordinator.Lock, against
// Mutex.Unlock to a waiting Mutex.Lock, timed to the waiter's lock returning
// from the holder's release returning and from its call. Each waiter gets the same pause to settle into waiting before the
// release (longer than etcd's 100 ms watcher sync, which a Mutex waiter's
// watch from a past revision otherwise waits for: the Mutex's best case). It
// returns a Markdown table.
func etcdHandoff(t *testing.T, cli *clientv3.Client, rounds int) string {
	const settle = 150 * time.Millisecond
	ctx := context.Background()
	c := etcdCoordinator(t, cli)
	held, err := c.Lock(ctx, "handoff", etcdTTL)
	if err != nil {
		t.Fatal(err)
	}
	// Each kind returns the handoff from the release's call and from its
	// return.
	ours := func() (fromCall, fromReturn time.Duration, err error) {
		got := make(chan *fencing.Held, 1)
		errc := make(chan error, 1)
		go func() {
			h, err := c.Lock(ctx, "handoff", etcdTTL)
			errc <- err
			got <- h
		}()
		time.Sleep(settle)
		called := time.Now()
		if err := held.Release(ctx); err != nil {
			return 0, 0, err
		}
		released := time.Now()
		if err := <-errc; err != nil {
			return 0, 0, err
		}
		held = <-got
		return time.Since(called), time.Since(released), nil
	}

	key := etcdPrefix("handoff-mutex") + "k"
	var sessions [2]*concurrency.Session
	for i := range sessions {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(etcdTTL/time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sessions[i] = s
	}
	holder := concurrency.NewMutex(sessions[0], key)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	turn := 0
	theirs := func() (fromCall, fromReturn time.Duration, err error) {
		turn++
		next := concurrency.NewMutex(sessions[turn%2], key)
		locked := make(chan error, 1)
		go func() { locked <- next.Lock(ctx) }()
		time.Sleep(settle)
		called := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			return 0, 0, err
		}
		unlocked := time.Now()
		err = <-locked
		fromCall, fromReturn = time.Since(called), time.Since(unlocked)
		holder = next
		return fromCall, fromReturn, err
	}

	kinds := []timedHandoff{
		{name: "ours: Held.Release → Coordinator.Lock", short: "ours", fn: ours},
		{name: "Mutex: Unlock → Lock", short: "Mutex", fn: theirs},
	}
	table := timedHandoffTable(t, kinds, rounds)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("etcd handoff, %d rounds each (%v settle before each release), fsync off; µs until the waiter's lock returned:\n\n", rounds, settle) + table
}
