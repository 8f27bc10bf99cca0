package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Workload is a randomized load of concurrent clients for fault tests: each
// grants, renews, releases and checks a few keys, calls stale leases late,
// and lets leases expire, while the test breaks the servers under it. Run it
// with a Recorder and check the history with CheckLinearizable: calls that
// failed under the fault must have been classified right (an unknown
// outcome as backend.ErrOutcomeUnknown, a call that surely did nothing as
// any other error) for the history to pass.
type Workload struct {
	// Keys are the keys the clients use; a few keep the history dense.
	Keys []string
	// Timeout and Margin are every lease's.
	Timeout, Margin time.Duration
	// CallTimeout bounds each call (through its context), so a client does
	// not wait out a fault in one call. Default 2s.
	CallTimeout time.Duration
	// Seed makes the clients' choices repeatable.
	Seed uint64
}

// WorkloadStats counts what a Workload's calls returned.
type WorkloadStats struct {
	// Calls is every call made; Grants the grants that succeeded; Unknown
	// the calls whose error wrapped backend.ErrOutcomeUnknown; Failed the
	// calls that failed otherwise with an error that is not a verdict.
	Calls, Grants, Unknown, Failed int
}

func (s WorkloadStats) String() string {
	return fmt.Sprintf("%d calls, %d grants, %d unknown outcomes, %d other failures", s.Calls, s.Grants, s.Unknown, s.Failed)
}

// Run runs one client per backend in clients until ctx ends; each backend
// is wrapped by rec (a client of its own) and is not closed. Give each
// client its own connection (or its own member of a cluster) to spread the
// fault across them.
func (w Workload) Run(ctx context.Context, rec *Recorder, clients []backend.Backend) WorkloadStats {
	return w.run(ctx, rec, clients, new(atomic.Int64))
}

// run is Run, counting the grants that succeeded in grants as they happen.
func (w Workload) run(ctx context.Context, rec *Recorder, clients []backend.Backend, grants *atomic.Int64) WorkloadStats {
	if w.CallTimeout == 0 {
		w.CallTimeout = 2 * time.Second
	}
	var (
		mu    sync.Mutex
		total WorkloadStats
		wg    sync.WaitGroup
	)
	for i, b := range clients {
		rb := rec.Wrap(b)
		wg.Go(func() {
			st := w.client(ctx, rb, i, grants)
			mu.Lock()
			defer mu.Unlock()
			total.Calls += st.Calls
			total.Grants += st.Grants
			total.Unknown += st.Unknown
			total.Failed += st.Failed
		})
	}
	wg.Wait()
	return total
}

func (w Workload) client(ctx context.Context, b backend.Backend, n int, grants *atomic.Int64) WorkloadStats {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(n)))
	var st WorkloadStats
	count := func(err error) {
		st.Calls++
		switch {
		case err == nil, isVerdict(err):
		case errors.Is(err, backend.ErrOutcomeUnknown):
			st.Unknown++
		default:
			st.Failed++
		}
	}
	held := make(map[string]string) // key → lease ID this client believes it holds
	var old []backend.Request       // leases it held once
	for op := 0; ctx.Err() == nil; op++ {
		key := w.Keys[rng.IntN(len(w.Keys))]
		id, holding := held[key]
		req := backend.Request{Key: key, LeaseID: id, Timeout: w.Timeout, Margin: w.Margin}
		cctx, cancel := context.WithTimeout(ctx, w.CallTimeout)
		switch r := rng.IntN(10); {
		case !holding && r < 5:
			req.LeaseID = fmt.Sprintf("c%d-%d", n, op)
			_, err := b.Grant(cctx, req)
			count(err)
			if err == nil {
				st.Grants++
				grants.Add(1)
				held[key] = req.LeaseID
				old = append(old, req)
			}
		case holding && r < 4:
			_, err := b.Renew(cctx, req)
			count(err)
			if err != nil {
				delete(held, key)
			}
		case holding && r < 6:
			count(b.Release(cctx, key, id))
			delete(held, key)
		case r < 8:
			_, _, err := b.Token(cctx, key)
			count(err)
		case r < 9 && len(old) > 0:
			o := old[rng.IntN(len(old))]
			if held[o.Key] == o.LeaseID {
				break
			}
			if rng.IntN(2) == 0 {
				_, err := b.Renew(cctx, o)
				count(err)
			} else {
				count(b.Release(cctx, o.Key, o.LeaseID))
			}
		default:
			d := time.Duration(rng.Int64N(int64(w.Timeout) / 2))
			if holding && rng.IntN(3) == 0 {
				d = w.Timeout + w.Margin // outlive the lease
				delete(held, key)
			}
			Sleep(cctx, d)
		}
		cancel()
	}
	return st
}

// isVerdict reports whether err is one of the contract's answers about the
// key's state (the call reached the store and was refused).
func isVerdict(err error) bool {
	return errors.Is(err, backend.ErrLeaseHeld) || errors.Is(err, backend.ErrLeaseExpired) ||
		errors.Is(err, backend.ErrLeaseNotFound) || errors.Is(err, backend.ErrTokenSpaceExhausted)
}

// RunAround runs w on clients, as Run does, around faults: each fault
// happens a second after the one before (the first a second after the calls
// begin), and the calls go on for a second after the last, and on until at
// least 10 grants went through (a loaded host makes few calls a second; a
// minute at most). It fails t unless the faults were exercised: those
// grants, and some calls that failed or whose outcome was unknown. Check
// rec's history afterwards.
func (w Workload) RunAround(t testing.TB, rec *Recorder, clients []backend.Backend, faults ...func()) WorkloadStats {
	t.Helper()
	const minGrants = 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var grants atomic.Int64
	done := make(chan WorkloadStats, 1)
	go func() { done <- w.run(ctx, rec, clients, &grants) }()
	for _, fault := range faults {
		time.Sleep(time.Second)
		fault()
	}
	time.Sleep(time.Second)
	for end := time.Now().Add(time.Minute); grants.Load() < minGrants && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	st := <-done
	t.Logf("workload: %v", st)
	if st.Grants < minGrants || st.Failed+st.Unknown == 0 {
		t.Fatalf("the workload (%v) did not exercise the faults", st)
	}
	return st
}
