package kubebackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// memLog is an ObservationLog in memory, on this process's monotonic
// clock: what a file on the boot clock is to processes of one host.
type memLog struct {
	mu   sync.Mutex
	seen map[string]memObs
}

type memObs struct {
	rv string
	at time.Time
}

func (l *memLog) Seen(name, rv string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.seen[name]
	if !ok || o.rv != rv {
		return 0, false
	}
	return time.Since(o.at), true
}

func (l *memLog) Saw(name, rv string, ago time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[name] = memObs{rv: rv, at: time.Now().Add(-ago)}
}

// TestObservationLogShared: backends that share an ObservationLog, each
// made afresh as a new process would be, take an abandoned lease one
// ttl + margin after its grant was sent, not never; InspectObserved counts
// the time unchanged from the first observation of any of them.
func TestObservationLogShared(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	log := &memLog{seen: make(map[string]memObs)}
	fresh := func() *kubebackend.Backend {
		b, err := kubebackend.New(context.Background(), client, ns, kubebackend.WithObservationLog(log))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	ctx := context.Background()
	const key = "observed-abandoned"
	req := backend.Request{Key: key, LeaseID: newLeaseID(t), Timeout: 1500 * time.Millisecond, Margin: 500 * time.Millisecond}
	start := time.Now()
	if _, err := fresh().Grant(ctx, req); err != nil { // then abandoned
		t.Fatal(err)
	}
	granted := time.Now()
	time.Sleep(time.Second)
	before := time.Now()
	st, obs, err := fresh().InspectObserved(ctx, key)
	if err != nil || !st.Live {
		t.Fatalf("InspectObserved = %+v, %v", st, err)
	}
	if obs.Unchanged < before.Sub(granted) || obs.Unchanged > time.Since(start) || obs.Expiry != req.Timeout+req.Margin {
		t.Fatalf("InspectObserved by a fresh backend: %+v; want unchanged between %v and %v (from the grant's send), expiry %v",
			obs, before.Sub(granted), time.Since(start), req.Timeout+req.Margin)
	}
	var tries int
	var longest time.Duration
	const pause = 100 * time.Millisecond
	for {
		tries++
		req.LeaseID = newLeaseID(t)
		t0 := time.Now()
		_, err := fresh().Grant(ctx, req)
		longest = max(longest, time.Since(t0))
		if err == nil {
			// A try that started after the lease ended (at most ttl +
			// margin after granted) gets it: the one that did started
			// at most a pause and a try after that.
			if late := t0.Sub(granted); late > req.Timeout+req.Margin+pause+longest {
				t.Errorf("granted on a try that started %v after the abandoned grant returned; want at most ttl + margin + a pause + the longest try (%v)", late, req.Timeout+req.Margin+pause+longest)
			}
			if d := time.Since(start); d < req.Timeout+req.Margin {
				t.Fatalf("granted %v after the abandoned grant, before its ttl + margin %v", d, req.Timeout+req.Margin)
			}
			t.Logf("granted on try %d, %v after the abandoned grant was sent", tries, t0.Sub(start))
			return
		}
		if !errors.Is(err, backend.ErrLeaseHeld) {
			t.Fatal(err)
		}
		if time.Since(granted) > 5*(req.Timeout+req.Margin) {
			t.Fatalf("fresh backends sharing a log did not take the abandoned lease in %v (%d tries; ttl + margin %v)", time.Since(granted), tries, req.Timeout+req.Margin)
		}
		time.Sleep(pause)
	}
}
