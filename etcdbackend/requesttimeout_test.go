package etcdbackend_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// reqTimeout is the Coordinator's request timeout in these tests.
const reqTimeout = 300 * time.Millisecond

// callBound is how long a call with context.Background() may take with
// reqTimeout: its attempts (resends stop once reqTimeout has passed, so
// at most two) and Hold's release of the lease its grant may have taken,
// each bounded by it, and a loaded machine's slack.
const callBound = 5*reqTimeout + 2*time.Second

// TestBackgroundCallsReturnWhenEtcdStopsAnswering: with etcd stopped, as
// if by SIGSTOP (a proxy that keeps the connections and carries nothing),
// or killed (its port closed), Grant, Hold and Lock with
// context.Background() return within the request timeout's bound (Lock,
// which waits through it, when its WithWaitTimeout ends) and say that etcd
// did not answer.
func TestBackgroundCallsReturnWhenEtcdStopsAnswering(t *testing.T) {
	cases := []struct {
		name string
		stop func(m *etcdtest.Member, p *etcdtest.Proxy)
	}{
		{"Stopped", func(_ *etcdtest.Member, p *etcdtest.Proxy) { p.SetMode(etcdtest.Pause) }},
		{"Killed", func(m *etcdtest.Member, _ *etcdtest.Proxy) { m.Stop() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := etcdtest.Start(t)
			p := etcdtest.StartProxy(t, m.ClientURL)
			b, _ := newBackend(t, etcdtest.NewClient(t, p.Endpoints()))
			c := fencing.New(b, fencing.WithRequestTimeout(reqTimeout))
			ctx := context.Background()
			if _, err := c.Grant(ctx, "warm", time.Minute); err != nil {
				t.Fatal(err) // the connection is up before the fault
			}
			tc.stop(m, p)
			defer p.SetMode(etcdtest.Forward)
			calls := map[string]func() error{
				"Grant": func() error { _, err := c.Grant(ctx, "k", time.Minute); return err },
				"Hold":  func() error { _, err := c.Hold(ctx, "k", time.Minute); return err },
				// Lock waits through a server that does not answer,
				// until its wait ends: with context.Background(),
				// WithWaitTimeout.
				"Lock": func() error {
					_, err := c.Lock(ctx, "k", time.Minute, fencing.WithWaitTimeout(2*reqTimeout))
					return err
				},
			}
			for _, name := range []string{"Grant", "Hold", "Lock"} {
				start := time.Now()
				err := returnsWithin(t, name, 3*callBound, calls[name])
				took := time.Since(start)
				t.Logf("%s with etcd %s returned after %v: %v", name, tc.name, took.Round(time.Millisecond), err)
				if took > callBound {
					t.Errorf("%s took %v with etcd %s, want within %v", name, took, tc.name, callBound)
				}
				if !errors.Is(err, fencing.ErrNoAnswer) {
					t.Errorf("%s with etcd %s: %v, want ErrNoAnswer", name, tc.name, err)
				}
			}
		})
	}
}

func returnsWithin(t *testing.T, what string, bound time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		t.Fatalf("%s still blocked after %v", what, bound)
		return nil
	}
}

// TestNewFailsOnEndpointThatIsNotEtcd: New checks that etcd answers, so an
// endpoint that accepts connections and never speaks etcd's protocol, or
// one that refuses them, fails it within its bound instead of the first
// request blocking.
func TestNewFailsOnEndpointThatIsNotEtcd(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for name, addr := range map[string]string{"silent": silent.Addr().String(), "closed": closedAddr} {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		const bound = 500 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		start := time.Now()
		b, err := etcdbackend.New(ctx, cli)
		cancel()
		if err == nil {
			b.Close()
			t.Fatalf("New on a %s endpoint succeeded", name)
		}
		if !errors.Is(err, backend.ErrUnreachable) {
			t.Errorf("New on a %s endpoint: %v, want ErrUnreachable", name, err)
		}
		if took := time.Since(start); took > bound+time.Second {
			t.Errorf("New on a %s endpoint took %v, want about %v", name, took, bound)
		}
	}
}
