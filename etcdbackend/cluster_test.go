package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// grantRecord is what one client learned about one lease it was granted.
type grantRecord struct {
	key, id       string
	token         uint64
	sent          time.Time // before the first attempt
	returned      time.Time
	validUntil    time.Time // the holder's last Deadline (sent + timeout of the last renewal)
	releaseSent   time.Time // zero unless released
	resentToLearn bool      // an ambiguous first attempt, settled by resending
}

// outcome is the settled result of one grant request (one lease ID).
type outcome struct {
	key, id string
	err     error // nil: granted and known to the holder
}

// TestClusterLeaderFailure runs clients that grant, renew and release on a
// 3-member cluster while its leader is stopped and later restarted, then
// checks the history: no token given twice, tokens in real-time order, no
// two holders relying on one key at once, every ambiguous grant settled, and
// by the server's own history (a watch from revision 1) no lease key created
// while another lived, and no lease created whose holder believes it failed.
func TestClusterLeaderFailure(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3)
	const prefix = "cluster/"
	const workers = 4
	keys := []string{"c0", "c1", "c2", "c3"}
	timeout, margin := 500*time.Millisecond, 500*time.Millisecond

	var (
		mu       sync.Mutex
		grants   []*grantRecord
		outcomes []outcome
		unknowns int
	)
	start := time.Now()
	// The clients run for 4 s, and on until 10 grants went through (a
	// loaded host makes few calls a second; a minute at most).
	stopAt, hardStop := start.Add(4*time.Second), start.Add(time.Minute)
	running := func() bool {
		mu.Lock()
		n := len(grants)
		mu.Unlock()
		now := time.Now()
		return now.Before(stopAt) || (n < 10 && now.Before(hardStop))
	}
	var wg sync.WaitGroup
	for w := range workers {
		cli := etcdtest.NewClient(t, cl.Endpoints())
		b, err := etcdbackend.New(context.Background(), cli, etcdbackend.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for op := 0; running(); op++ {
				key := keys[rng.IntN(len(keys))]
				r := backend.Request{Key: key, LeaseID: fmt.Sprintf("w%d-%d", w, op), Timeout: timeout, Margin: margin}
				g, err, ambiguous := settleGrant(b, r, time.Duration(1+rng.IntN(30))*time.Millisecond)
				mu.Lock()
				outcomes = append(outcomes, outcome{key: key, id: r.LeaseID, err: err})
				if ambiguous {
					unknowns++
				}
				if g != nil {
					grants = append(grants, g)
				}
				mu.Unlock()
				if g == nil {
					time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
					continue
				}
				hold(b, rng, r, g, &mu)
			}
		})
	}

	// The fault: stop the leader a second in, start it again 1.5s later.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	time.Sleep(time.Until(start.Add(time.Second)))
	leader, err := cl.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Stop()
	t.Logf("stopped leader %s at %v", leader.Name, time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Until(start.Add(2500 * time.Millisecond)))
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted %s at %v", leader.Name, time.Since(start).Round(time.Millisecond))
	wg.Wait()

	if len(grants) < 10 {
		t.Fatalf("only %d grants in the run", len(grants))
	}
	var held, other int
	for _, o := range outcomes {
		switch {
		case errors.Is(o.err, backend.ErrLeaseHeld):
			held++
		case o.err != nil:
			other++
		}
	}
	t.Logf("%d grant requests: %d granted, %d held, %d other errors; %d ambiguous, settled by resending",
		len(outcomes), len(grants), held, other, unknowns)

	// No token twice; real-time order; no overlap of holders' reliance.
	byToken := make(map[uint64]*grantRecord)
	for _, g := range grants {
		if o := byToken[g.token]; o != nil {
			t.Fatalf("token %d given to %s and %s", g.token, o.id, g.id)
		}
		byToken[g.token] = g
	}
	for _, x := range grants {
		for _, y := range grants {
			if x.key != y.key || x == y {
				continue
			}
			if x.returned.Before(y.sent) && x.token >= y.token {
				t.Errorf("%s: grant %s (token %d) returned before grant %s (token %d) was sent", x.key, x.id, x.token, y.id, y.token)
			}
			if x.token < y.token {
				end := x.validUntil
				if !x.releaseSent.IsZero() && x.releaseSent.Before(end) {
					end = x.releaseSent
				}
				if end.After(y.returned) {
					t.Errorf("%s: holder %s (token %d) relied on its lease until %v, after %s (token %d) was granted at %v",
						x.key, x.id, x.token, end.Sub(start), y.id, y.token, y.returned.Sub(start))
				}
			}
		}
	}

	// The server's view, from its full history.
	cli := etcdtest.NewClient(t, cl.Endpoints())
	created := serverHistory(t, cli, prefix, keys)
	for _, o := range outcomes {
		tok, ok := created[o.id]
		switch {
		case o.err == nil:
			if !ok {
				t.Errorf("grant %s succeeded but etcd never created its lease key", o.id)
			} else if byToken[tok] == nil || byToken[tok].id != o.id {
				t.Errorf("grant %s: etcd created token %d, the holder got another", o.id, tok)
			}
		case errors.Is(o.err, backend.ErrLeaseExpired), errors.Is(o.err, backend.ErrLeaseNotFound):
			// Granted, and over before the resend learned of it.
			if !ok {
				t.Errorf("grant %s settled as %v, but etcd never created it", o.id, o.err)
			}
		default:
			if ok {
				t.Errorf("grant %s failed for its caller (%v), but etcd created it with token %d", o.id, o.err, tok)
			}
		}
	}
}

// settleGrant sends r with a short deadline (so that some attempts are cut
// off after the server got them) and, while the outcome is unknown, resends
// it with the same lease ID and a normal deadline. It returns the grant when
// granted, the settled error otherwise, and whether an answer was ambiguous.
func settleGrant(b backend.Backend, r backend.Request, first time.Duration) (*grantRecord, error, bool) {
	sent := time.Now()
	ambiguous := false
	for attempt := 0; ; attempt++ {
		d := time.Second
		if attempt == 0 {
			d = first
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		l, err := b.Grant(ctx, r)
		cancel()
		if err == nil {
			returned := time.Now()
			return &grantRecord{key: r.Key, id: r.LeaseID, token: l.Token, sent: sent, returned: returned,
				validUntil: sent.Add(r.Timeout), resentToLearn: ambiguous}, nil, ambiguous
		}
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			if attempt > 0 && !isSettled(err) {
				// A resend that could not reach the cluster: the first
				// attempt's outcome is still unknown, so keep asking.
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return nil, err, ambiguous
		}
		ambiguous = true
		if attempt > 100 {
			return nil, fmt.Errorf("unsettled after %d resends: %w", attempt, err), ambiguous
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isSettled reports whether err is an answer about the lease, not a failure
// to ask.
func isSettled(err error) bool {
	return errors.Is(err, backend.ErrLeaseHeld) || errors.Is(err, backend.ErrLeaseExpired) || errors.Is(err, backend.ErrLeaseNotFound)
}

// hold renews the lease a few times and then releases it or lets it expire,
// updating g under mu.
func hold(b backend.Backend, rng *rand.Rand, r backend.Request, g *grantRecord, mu *sync.Mutex) {
	for range rng.IntN(3) {
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := b.Renew(ctx, r)
		cancel()
		if err != nil {
			// Expired, not found, or unknown: stop relying on it (the
			// earlier deadline stands).
			return
		}
		mu.Lock()
		g.validUntil = sent.Add(r.Timeout)
		mu.Unlock()
	}
	if rng.IntN(5) == 0 {
		return // let it expire
	}
	mu.Lock()
	g.releaseSent = time.Now()
	mu.Unlock()
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := b.Release(ctx, r.Key, r.LeaseID)
		cancel()
		if !errors.Is(err, backend.ErrOutcomeUnknown) {
			return
		}
	}
}

// serverHistory reads every event under prefix since revision 1 and checks
// that each lease key alternates creation and deletion, that an update keeps
// its creation revision, and returns the lease ID -> token of each creation.
func serverHistory(t *testing.T, cli *clientv3.Client, prefix string, keys []string) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	head, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	last := head.Header.Revision
	created := make(map[string]uint64)
	live := make(map[string]int64) // etcd lease key -> CreateRevision while it exists
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(1))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			if k[len(k)-2:] != "/l" {
				continue
			}
			switch ev.Type {
			case mvccpb.PUT:
				if ev.Kv.Version == 1 {
					if rev, ok := live[k]; ok {
						t.Fatalf("lease key %s created at revision %d while the one from %d lived", k, ev.Kv.ModRevision, rev)
					}
					live[k] = ev.Kv.CreateRevision
					id := leaseIDOf(string(ev.Kv.Value))
					if _, dup := created[id]; dup {
						t.Fatalf("lease %s created twice", id)
					}
					created[id] = uint64(ev.Kv.CreateRevision)
				} else if live[k] != ev.Kv.CreateRevision {
					t.Fatalf("lease key %s updated with creation revision %d, live one %d", k, ev.Kv.CreateRevision, live[k])
				}
			case mvccpb.DELETE:
				if _, ok := live[k]; !ok {
					t.Fatalf("lease key %s deleted at %d while absent", k, ev.Kv.ModRevision)
				}
				delete(live, k)
			}
		}
		if resp.Header.Revision >= last && len(resp.Events) > 0 && resp.Events[len(resp.Events)-1].Kv.ModRevision >= last {
			break
		}
		if len(resp.Events) == 0 && resp.Header.Revision >= last {
			break
		}
	}
	return created
}

// leaseIDOf returns the lease ID at the end of a lease record
// ("v1:asked:granted:margin:id").
func leaseIDOf(v string) string {
	for i, n := 0, 0; i < len(v); i++ {
		if v[i] == ':' {
			if n++; n == 4 {
				return v[i+1:]
			}
		}
	}
	return ""
}
