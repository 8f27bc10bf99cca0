package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
)

// Contention handoff on etcd: one key, a holder and N waiters, each with an
// etcd client of its own (its own connection), all on one embedded etcd
// member. The holder releases; the time measured is from its release call
// (and from the release's return) to the next holder's lock call returning.
// The new holder then holds while the one that released joins the line
// again, so every release has N waiters behind it. Each contender's
// participants are set up once; a batch of contentionHandoffs handoffs of
// one contender runs on a fresh key, and a round runs one batch of each
// contender in a fresh random order, so the ratio to the Mutex is taken
// within the round.
const (
	// contentionHandoffs is the number of handoffs in one batch.
	contentionHandoffs = 8
	// contentionSettle is the pause between the joining of the waiter that
	// released last and the next release: longer than the 100 ms in which
	// etcd syncs a watch that starts from a past revision, which a Mutex
	// waiter's watch of its predecessor's key does (without it a release
	// right after a join waits for that sync: the Mutex's best case).
	contentionSettle = 150 * time.Millisecond
	// contentionWait bounds each wait of the batch: for a grant after a
	// release, for a waiter to join.
	contentionWait = 30 * time.Second
)

// contentionWaiters are the numbers of waiters behind each release.
var contentionWaiters = []int{1, 8, 32}

// contentionSection measures the Lock handoff under contention on etcd:
// fencing's Lock without FIFO (every waiter wakes on a release and tries a
// grant), with fencing.WithFIFO (only the next waiter wakes, then tries
// once), and etcd's concurrency.Mutex (FIFO by revision, each waiter
// watching the key ahead of it), with a Session per waiter.
func contentionSection(t *testing.T, r *report) {
	cli := startEtcd(t, false)
	endpoint := cli.Endpoints()[0]
	kinds := []contentionKind{
		{name: "Lock", participant: fencingParticipant(nil)},
		{name: "Lock, WithFIFO", participant: fencingParticipant(fencing.WithFIFO())},
		{name: "Mutex", participant: mutexParticipant}, // the base of the ratios: last
	}
	most := slices.Max(contentionWaiters)
	prefix := etcdPrefix("contention")
	for i := range kinds {
		for range most + 1 {
			kinds[i].parts = append(kinds[i].parts, kinds[i].participant(t, endpoint, prefix+fmt.Sprint(i, "/")))
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "etcd contention handoff: one key, a holder and N waiters, each with an etcd client (connection) of its own, "+
		"on one embedded member (fsync off); %d rounds of %d handoffs per contender and N, the contenders in a fresh random order each round, "+
		"%v between a waiter's joining and the next release. µs until the next holder's lock returned; ratio = contender / Mutex "+
		"(median of the per-round ratios of the batches' medians, from the release's call; above 1: the Mutex is faster):\n\n",
		r.rounds, contentionHandoffs, contentionSettle)
	fmt.Fprintln(&out, "| waiters | contender | handoffs | from the release's call: median | p90 | from its return: median | p90 | / Mutex | grant attempts woken by a release | grant attempts per handoff | etcd Txns per handoff | etcd requests per handoff | to the longest waiter |")
	fmt.Fprintln(&out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var roundLines []string
	var methods strings.Builder
	fmt.Fprint(&methods, "| waiters | contender |")
	for _, m := range rpcMethods {
		fmt.Fprintf(&methods, " %s |", m.name)
	}
	fmt.Fprintf(&methods, " other |\n|---:|---|%s\n", strings.Repeat("---:|", len(rpcMethods)+1))
	batch := 0
	for _, n := range contentionWaiters {
		stats := make([]contentionStats, len(kinds))
		for range r.rounds {
			for _, i := range rand.Perm(len(kinds)) {
				batch++
				s, err := contentionBatch(kinds[i].parts[:n+1], fmt.Sprint("key", batch), contentionHandoffs)
				if err != nil {
					t.Fatalf("contention, %d waiters: %s: %v", n, kinds[i].name, err)
				}
				stats[i].add(s)
			}
		}
		mutex := &stats[len(kinds)-1]
		for i, k := range kinds {
			s := &stats[i]
			ratio := ""
			if i < len(kinds)-1 {
				rs := s.roundRatios(mutex)
				ratio = fmt.Sprintf("**%.2fx**", median(rs))
				roundLines = append(roundLines, fmt.Sprintf("%d waiters, %s / Mutex: %s (medians: %.2fx from the call, %.2fx from the return).",
					n, k.name, formatRatios(rs), median(s.fromCall)/median(mutex.fromCall), median(s.fromReturn)/median(mutex.fromReturn)))
			}
			h := float64(len(s.fromCall))
			fmt.Fprintf(&methods, "| %d | %s |", n, k.name)
			for _, v := range s.rpcs.rpcs {
				fmt.Fprintf(&methods, " %.2f |", float64(v)/h)
			}
			fmt.Fprintln(&methods)
			fmt.Fprintf(&out, "| %d | %s | %d | %.0f | %.0f | %.0f | %.0f | %s | %.2f | %.2f | %.2f | %.2f | %.0f%% |\n",
				n, k.name, len(s.fromCall), median(s.fromCall), percentile(s.fromCall, 0.9),
				median(s.fromReturn), percentile(s.fromReturn, 0.9), ratio,
				float64(s.woken)/h, float64(s.grants)/h, float64(s.rpcs.txns())/h, float64(s.rpcs.requests())/h, 100*float64(s.inOrder)/h)
		}
	}
	fmt.Fprintf(&out, "\nPer-round ratios, from the release's call:\n\n%s\n", strings.Join(roundLines, "\n"))
	fmt.Fprintf(&out, "\netcd requests per handoff by method (unary RPCs of every participant in the cycle):\n\n%s", methods.String())
	fmt.Fprintln(&out, "\nA handoff here is a cycle: the release, the next holder's grant, the releaser's joining the line again, the pause. "+
		"Grant attempts count the fencing backend's Grant calls (a wrapping backend.Backend); \"woken by a release\" leaves out those of "+
		"the waiter that released, which in the same cycle joins again (one attempt without FIFO). The Mutex's attempt is its Txn: it makes "+
		"one when it joins and none when it is woken (it then reads its key with a Get), so its columns count Txns. Txns and requests are "+
		"every unary etcd RPC of every participant in the cycle, the release's and the rejoin's included (counted by a gRPC interceptor on "+
		"each client; watch and keep-alive streams are not counted). \"To the longest waiter\" is the share of handoffs that went to the "+
		"waiter that had joined first of those waiting.")
	r.notes = append(r.notes, out.String())
}

// contentionKind is one contender of the contention handoff.
type contentionKind struct {
	name        string
	participant func(t *testing.T, endpoint, prefix string) *participant
	parts       []*participant
}

// A participant is one process of a contention handoff: a holder or a
// waiter, on an etcd client of its own.
type participant struct {
	// lock waits for key, holds it, and returns how to release it.
	lock func(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	// grants counts the backend's Grant calls (fencing's participants).
	grants atomic.Int64
	// txnAttempts says a grant attempt is a Txn (the Mutex's).
	txnAttempts bool
	// rpcs counts the client's unary RPCs.
	rpcs rpcCount
}

// counts returns p's grant attempts, Txns and unary RPCs so far.
func (p *participant) counts() contentionCounts {
	c := contentionCounts{grants: p.grants.Load()}
	for i := range c.rpcs {
		c.rpcs[i] = p.rpcs.n[i].Load()
	}
	if p.txnAttempts {
		c.grants = c.txns()
	}
	return c
}

// contentionCounts are a participant's (or several's) counters.
type contentionCounts struct {
	grants int64
	rpcs   [nMethods + 1]int64 // by rpcMethods, then the others
}

func (a contentionCounts) plus(b contentionCounts) contentionCounts {
	a.grants += b.grants
	for i := range a.rpcs {
		a.rpcs[i] += b.rpcs[i]
	}
	return a
}

func (a contentionCounts) minus(b contentionCounts) contentionCounts {
	a.grants -= b.grants
	for i := range a.rpcs {
		a.rpcs[i] -= b.rpcs[i]
	}
	return a
}

func (a contentionCounts) txns() int64 { return a.rpcs[0] }

func (a contentionCounts) requests() (n int64) {
	for _, v := range a.rpcs {
		n += v
	}
	return n
}

// nMethods is len(rpcMethods).
const nMethods = 7

// rpcMethods are the unary etcd RPCs counted apart (Txn first), with
// their names in the report.
var rpcMethods = [nMethods]struct{ method, name string }{
	{"/etcdserverpb.KV/Txn", "Txn"},
	{"/etcdserverpb.KV/Range", "Range"},
	{"/etcdserverpb.KV/Put", "Put"},
	{"/etcdserverpb.KV/DeleteRange", "DeleteRange"},
	{"/etcdserverpb.Lease/LeaseGrant", "LeaseGrant"},
	{"/etcdserverpb.Lease/LeaseRevoke", "LeaseRevoke"},
	{"/etcdserverpb.Lease/LeaseTimeToLive", "LeaseTimeToLive"},
}

// rpcCount counts a client's unary etcd RPCs by method (rpcMethods, then
// the others).
type rpcCount struct {
	n [nMethods + 1]atomic.Int64
}

func (c *rpcCount) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	i := 0
	for i < len(rpcMethods) && rpcMethods[i].method != method {
		i++
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.n[i].Add(1) // once answered: a join has its place once its Txn is
	return err
}

// countedClient returns a new etcd client of endpoint whose unary RPCs c
// counts; it is closed in t's cleanup.
func countedClient(t *testing.T, endpoint string, c *rpcCount) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(c.intercept)},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// fencingParticipant makes participants that wait with Coordinator.Lock,
// with option when it is not nil, each on an etcd backend of its own (all
// with one prefix) wrapped to count its grants.
func fencingParticipant(option fencing.LockOption) func(t *testing.T, endpoint, prefix string) *participant {
	var opts []fencing.LockOption
	if option != nil {
		opts = append(opts, option)
	}
	return func(t *testing.T, endpoint, prefix string) *participant {
		t.Helper()
		p := new(participant)
		b, err := etcdbackend.New(context.Background(), countedClient(t, endpoint, &p.rpcs), etcdbackend.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		c := fencing.New(countGrants(b, &p.grants))
		p.lock = func(ctx context.Context, key string) (func(context.Context) error, error) {
			h, err := c.Lock(ctx, key, etcdTTL, opts...)
			if err != nil {
				return nil, err
			}
			return h.Release, nil
		}
		return p
	}
}

// mutexParticipant makes a participant that waits with concurrency.Mutex
// (a new one for each lock) on a Session of its own.
func mutexParticipant(t *testing.T, endpoint, prefix string) *participant {
	t.Helper()
	p := &participant{txnAttempts: true}
	s, err := concurrency.NewSession(countedClient(t, endpoint, &p.rpcs), concurrency.WithTTL(int(etcdTTL/time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p.lock = func(ctx context.Context, key string) (func(context.Context) error, error) {
		m := concurrency.NewMutex(s, prefix+key)
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		return m.Unlock, nil
	}
	return p
}

// countGrants returns b with its Grant calls counted in n, keeping the
// optional capabilities that Lock looks for (backend.Notifier,
// backend.Queuer, backend.Inspector): the etcd backend has them all, and a
// wrapper without one would measure another Lock.
func countGrants(b backend.Backend, n *atomic.Int64) backend.Backend {
	return struct {
		grantCounter
		backend.Notifier
		backend.Queuer
		backend.Inspector
	}{grantCounter{b, n}, b.(backend.Notifier), b.(backend.Queuer), b.(backend.Inspector)}
}

// grantCounter is a backend.Backend that counts its Grant calls.
type grantCounter struct {
	backend.Backend
	n *atomic.Int64
}

func (g grantCounter) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	g.n.Add(1)
	return g.Backend.Grant(ctx, req)
}

// contentionSample is one batch of one contender.
type contentionSample struct {
	fromCall, fromReturn []float64 // µs, one per handoff
	// woken counts the grant attempts in each cycle of every participant
	// but the one that released; all counts every participant's.
	woken, all contentionCounts
	// inOrder counts the handoffs to the waiter that had waited longest.
	inOrder int
}

// contentionStats gathers a contender's batches at one number of waiters.
type contentionStats struct {
	fromCall, fromReturn []float64
	batchCall            []float64 // each batch's median from the call
	woken, grants        int64
	inOrder              int
	rpcs                 contentionCounts // every participant's, in the cycles
}

func (s *contentionStats) add(b contentionSample) {
	s.fromCall = append(s.fromCall, b.fromCall...)
	s.fromReturn = append(s.fromReturn, b.fromReturn...)
	s.batchCall = append(s.batchCall, median(b.fromCall))
	s.woken += b.woken.grants
	s.inOrder += b.inOrder
	s.grants += b.all.grants
	s.rpcs = s.rpcs.plus(b.all)
}

// roundRatios returns, per round, s's batch median over base's.
func (s *contentionStats) roundRatios(base *contentionStats) []float64 {
	out := make([]float64, len(s.batchCall))
	for i := range out {
		out[i] = s.batchCall[i] / base.batchCall[i]
	}
	return out
}

// percentile returns the q-quantile of v by the nearest rank.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

// contentionBatch runs handoffs handoffs of key among parts: parts[0]
// takes the key, the others join the line behind it, and each release
// hands the key to one of them while the releaser joins again. It ends
// with every waiter gone and the key free.
func contentionBatch(parts []*participant, key string, handoffs int) (contentionSample, error) {
	base := context.Background()
	type grant struct {
		who    int
		at     time.Time
		unlock func(context.Context) error
		err    error
	}
	granted := make(chan grant, len(parts))
	cancels := make([]context.CancelFunc, len(parts))
	var running sync.WaitGroup
	// join starts parts[i]'s lock and returns once its first Txn (its
	// grant, its place in the line) has been answered, so that the waiters
	// take their places in the order they join.
	join := func(i int) error {
		ctx, cancel := context.WithCancel(base)
		cancels[i] = cancel
		before := parts[i].rpcs.n[0].Load()
		running.Go(func() {
			unlock, err := parts[i].lock(ctx, key)
			granted <- grant{i, time.Now(), unlock, err}
		})
		for deadline := time.Now().Add(contentionWait); parts[i].rpcs.n[0].Load() == before; {
			if time.Now().After(deadline) {
				return fmt.Errorf("waiter %d sent nothing within %v", i, contentionWait)
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	total := func() (c contentionCounts) {
		for _, p := range parts {
			c = c.plus(p.counts())
		}
		return c
	}
	// end makes every waiter give up, then releases the holder's lease.
	end := func(holder int, unlock func(context.Context) error) error {
		for i, cancel := range cancels {
			if i != holder && cancel != nil {
				cancel()
			}
		}
		running.Wait()
		close(granted)
		var errs []error
		for g := range granted {
			if g.err == nil { // a grant the test has not seen: a bug
				errs = append(errs, fmt.Errorf("participant %d got the key while %d held it", g.who, holder))
				g.unlock(base)
			}
		}
		if unlock != nil {
			errs = append(errs, unlock(base))
		}
		cancels[holder]()
		return errors.Join(errs...)
	}

	var s contentionSample
	var waiting []int // the waiters in the order they joined
	holder := 0
	var unlock func(context.Context) error
	if err := join(0); err != nil {
		return s, errors.Join(err, end(0, nil))
	}
	g := <-granted
	if g.err != nil {
		return s, errors.Join(g.err, end(0, nil))
	}
	unlock = g.unlock
	for i := 1; i < len(parts); i++ {
		if err := join(i); err != nil {
			return s, errors.Join(err, end(holder, unlock))
		}
		waiting = append(waiting, i)
	}
	time.Sleep(contentionSettle)
	for range handoffs {
		all0, mine0 := total(), parts[holder].counts()
		called := time.Now()
		err := unlock(base)
		returned := time.Now()
		unlock = nil
		if err != nil {
			return s, errors.Join(fmt.Errorf("release: %w", err), end(holder, nil))
		}
		var g grant
		select {
		case g = <-granted:
		case <-time.After(contentionWait):
			return s, errors.Join(fmt.Errorf("no waiter got the key within %v of its release", contentionWait), end(holder, nil))
		}
		if g.err != nil {
			return s, errors.Join(fmt.Errorf("waiter %d: %w", g.who, g.err), end(holder, nil))
		}
		s.fromCall = append(s.fromCall, float64(g.at.Sub(called))/float64(time.Microsecond))
		s.fromReturn = append(s.fromReturn, float64(g.at.Sub(returned))/float64(time.Microsecond))
		released := holder
		cancels[released]()
		if g.who == waiting[0] {
			s.inOrder++
		}
		waiting = slices.DeleteFunc(waiting, func(i int) bool { return i == g.who })
		holder, unlock = g.who, g.unlock
		if err := join(released); err != nil {
			return s, errors.Join(err, end(holder, unlock))
		}
		waiting = append(waiting, released)
		time.Sleep(contentionSettle)
		select {
		case g := <-granted:
			err := fmt.Errorf("participant %d got the key while %d held it (%v)", g.who, holder, g.err)
			return s, errors.Join(err, end(holder, unlock))
		default:
		}
		all1, mine1 := total(), parts[released].counts()
		cycle := all1.minus(all0)
		s.all = s.all.plus(cycle)
		s.woken = s.woken.plus(cycle.minus(mine1.minus(mine0)))
	}
	return s, end(holder, unlock)
}
