package etcdbackend_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/contentiontest"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// harness runs the conformance suite on one real etcd server, giving each
// backend a fresh prefix (an empty key space).
type harness struct {
	cli *clientv3.Client
}

func newHarness(t testing.TB) *harness {
	return &harness{cli: etcdtest.Client(t)}
}

func (h *harness) NewBackend(_ context.Context, t testing.TB) (backend.Backend, error) {
	prefix := newPrefix("conformance")
	return etcdbackend.New(context.Background(), h.cli, etcdbackend.WithPrefix(prefix))
}

// Reopen implements conformance.Reopener: a backend on b's prefix, with a
// client of its own.
func (h *harness) Reopen(ctx context.Context, t testing.TB, b backend.Backend) (backend.Backend, error) {
	cli := etcdtest.NewClient(t, h.cli.Endpoints())
	return etcdbackend.New(ctx, cli, etcdbackend.WithPrefix(etcdbackend.Prefix(b.(*etcdbackend.Backend))))
}

func (h *harness) Wait(ctx context.Context, d time.Duration) error {
	return conformance.Sleep(ctx, d)
}

// Traits: etcd's minimum TTL with the test servers' election settings is
// 1s. A lease's key lives on after its TTL until the leader's revoke loop
// (every 500ms) deletes it, hence the slack.
func (h *harness) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: etcdtest.MinTTL, Slack: 1500 * time.Millisecond, DenseTokens: false}
}

// NewBackendWithRetention implements conformance.Retainer.
func (h *harness) NewBackendWithRetention(_ context.Context, _ testing.TB, d time.Duration) (backend.Backend, error) {
	prefix := newPrefix("retention")
	return etcdbackend.New(context.Background(), h.cli, etcdbackend.WithPrefix(prefix), etcdbackend.WithRetention(d))
}

// Records implements conformance.Retainer: the user keys that have an etcd
// key under b's prefix, from a read of every etcd key there (Size counts
// etcd keys: two to five per user key).
func (h *harness) Records(ctx context.Context, b backend.Backend) (int, error) {
	return userKeys(ctx, h.cli, etcdbackend.Prefix(b.(*etcdbackend.Backend)))
}

// userKeys counts the user keys that have an etcd key under prefix.
func userKeys(ctx context.Context, cli *clientv3.Client, prefix string) (int, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	seen := make(map[string]bool)
	for _, kv := range resp.Kvs {
		enc, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
		seen[enc] = true
	}
	return len(seen), nil
}

func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness(t))
}

// TestContention checks the spans and contention metrics of a contention
// on this backend (see contentiontest.Run).
func TestContention(t *testing.T) {
	contentiontest.Run(t, newHarness(t))
}

func BenchmarkConformance(b *testing.B) {
	conformance.RunBenchmarks(b, newHarness(b))
}
