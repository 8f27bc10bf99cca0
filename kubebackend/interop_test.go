package kubebackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// elector runs a client-go LeaderElector on Lease name and records when it
// led.
type elector struct {
	mu             sync.Mutex
	started, ended time.Time
	led            chan struct{}
	done           chan struct{}
	cancel         context.CancelFunc
}

func startElector(t *testing.T, client kubernetes.Interface, ns, name string, releaseOnCancel bool) *elector {
	t.Helper()
	e := &elector{led: make(chan struct{}), done: make(chan struct{})}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metaName(ns, name),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go-elector"},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   2 * time.Second,
		RenewDeadline:   1500 * time.Millisecond,
		RetryPeriod:     250 * time.Millisecond,
		ReleaseOnCancel: releaseOnCancel,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				e.mu.Lock()
				e.started = time.Now()
				e.mu.Unlock()
				close(e.led)
			},
			OnStoppedLeading: func() {
				e.mu.Lock()
				e.ended = time.Now()
				e.mu.Unlock()
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		le.Run(ctx)
	}()
	t.Cleanup(e.stop)
	return e
}

func (e *elector) stop() {
	e.cancel()
	<-e.done
}

func (e *elector) times() (started, ended time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started, e.ended
}

// TestLeaderElectorWaitsForFencingLease: a client-go LeaderElector on the
// Lease of a held fencing lease does not lead while the lease is held and
// renewed, and leads once it is released.
func TestLeaderElectorWaitsForFencingLease(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(context.Background(), client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := fencing.New(b)
	ctx := context.Background()
	const name = "interop-elector-waits"
	h, err := c.Hold(ctx, name, 2*time.Second, fencing.WithOwner("fencing-holder"))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	e := startElector(t, client, ns, name, true)
	// Several lease lengths with the holder renewing: the elector must
	// keep waiting.
	select {
	case <-e.led:
		t.Fatal("the elector started leading while the fencing lease was held")
	case <-time.After(8 * time.Second):
	}
	if h.Err() != nil {
		t.Fatalf("the holder lost its lease meanwhile: %v", h.Err())
	}
	sentRelease := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-e.led:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector did not lead within 30s of the release")
	}
	if started, _ := e.times(); started.Before(sentRelease) {
		t.Fatalf("the elector led at %v, before the release was sent at %v", started, sentRelease)
	}
}

// TestFencingWaitsForLeaderElector: a fencing grant on a Lease that a
// LeaderElector leads is refused while it leads; after it releases on
// cancel the grant succeeds, and after one that stopped without releasing,
// only once the Lease was seen unchanged for its leaseDurationSeconds.
func TestFencingWaitsForLeaderElector(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(context.Background(), client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := fencing.New(b)
	ctx := context.Background()

	for _, release := range []bool{true, false} {
		name := "interop-fencing-waits-release"
		if !release {
			name = "interop-fencing-waits-crash"
		}
		e := startElector(t, client, ns, name, release)
		select {
		case <-e.led:
		case <-time.After(30 * time.Second):
			t.Fatal("the elector did not lead within 30s")
		}
		for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
			_, err := c.Grant(ctx, name, time.Minute)
			if started, ended := e.times(); ended.IsZero() || ended.Before(started) {
				if !errors.Is(err, fencing.ErrLeaseHeld) {
					t.Fatalf("Grant while the elector leads: %v, want ErrLeaseHeld", err)
				}
			}
			st, err := c.Inspect(ctx, name)
			if err != nil || (st.Live && st.Owner != "client-go-elector") {
				t.Fatalf("Inspect while the elector leads = %+v, %v; want its identity as the owner", st, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		stopped := time.Now()
		e.stop()
		lockCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		h, err := c.Lock(lockCtx, name, time.Minute) // the Held lives until cancel
		if err != nil {
			cancel()
			t.Fatalf("Lock after the elector stopped (release on cancel %v): %v", release, err)
		}
		got := time.Since(stopped)
		if _, ended := e.times(); !ended.IsZero() && ended.After(time.Now()) {
			t.Fatal("the elector's leading ended after the fencing grant")
		}
		// The backend last saw the elector's Lease change up to one
		// read (200ms apart) and one elector retry (250ms) before it
		// stopped, and counts its 2s from then.
		if !release && got < 2*time.Second-time.Second {
			t.Fatalf("granted %v after an elector with a 2s lease stopped without releasing; want at least 1s", got)
		}
		t.Logf("release on cancel %v: fencing lease granted %v after the elector stopped", release, got)
		if err := h.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		cancel()
	}
}
