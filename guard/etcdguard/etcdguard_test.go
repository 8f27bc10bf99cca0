package etcdguard_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/etcdguard"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/metrictest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// harness makes guarded stores on one etcd: each under its own prefix.
type harness struct {
	cli *clientv3.Client
	n   atomic.Int64
}

func (h *harness) NewGuardStore(ctx context.Context, t testing.TB) (conformance.GuardStore, error) {
	base := fmt.Sprintf("test/%d/", h.n.Add(1))
	return &store{
		Guard:  etcdguard.New(h.cli, etcdguard.WithPrefix(base+"fence/")),
		cli:    h.cli,
		values: base + "value/",
	}, nil
}

// store keeps one value per resource under its own prefix, put in the
// guard's Txn.
type store struct {
	*etcdguard.Guard
	cli    *clientv3.Client
	values string
}

func (s *store) Write(ctx context.Context, resource string, token uint64, value string) error {
	_, err := s.Guard.Write(ctx, resource, token, clientv3.OpPut(s.values+resource, value))
	return err
}

// FailedWrite adds a put that etcd refuses (WithIgnoreValue on a key that
// does not exist), so the Txn applies nothing.
func (s *store) FailedWrite(ctx context.Context, resource string, token uint64, value string) error {
	_, err := s.Guard.Write(ctx, resource, token,
		clientv3.OpPut(s.values+resource, value),
		clientv3.OpPut(s.values+"missing/"+resource, "", clientv3.WithIgnoreValue()))
	if err == nil {
		return errors.New("the Txn with a failing put succeeded")
	}
	return err
}

// Drop deletes the value and the fence in the guard's Txn.
func (s *store) Drop(ctx context.Context, resource string, token uint64) error {
	_, err := s.Guard.Write(ctx, resource, token, clientv3.OpDelete(s.values+resource), s.Guard.Drop(resource))
	return err
}

// FailedDrop adds a put that etcd refuses, as FailedWrite does.
func (s *store) FailedDrop(ctx context.Context, resource string, token uint64) error {
	_, err := s.Guard.Write(ctx, resource, token,
		clientv3.OpDelete(s.values+resource), s.Guard.Drop(resource),
		clientv3.OpPut(s.values+"missing/"+resource, "", clientv3.WithIgnoreValue()))
	if err == nil {
		return errors.New("the Txn with a failing put succeeded")
	}
	return err
}

func (s *store) Read(ctx context.Context, resource string) (string, error) {
	resp, err := s.cli.Get(ctx, s.values+resource)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}

func TestConformance(t *testing.T) {
	conformance.RunGuard(t, &harness{cli: etcdtest.Client(t)})
}

func TestFenceRecord(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx := context.Background()
	g := etcdguard.New(cli)
	if err := g.Admit(ctx, "orders/42", 42); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "orders/42", 9); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("Admit 9 after 42: got %v, want ErrStaleToken", err)
	}
	resp, err := cli.Get(ctx, "fencing-fence/orders/42")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("fence record: %v, %v", resp, err)
	}
	if got := string(resp.Kvs[0].Value); got != "00000000000000000042" {
		t.Errorf("fence value %q, want 20 zero-padded digits", got)
	}
	// The whole uint64 range orders right.
	if err := g.Admit(ctx, "orders/42", math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "orders/42", math.MaxUint64-1); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("Admit(MaxUint64-1) after MaxUint64: got %v, want ErrStaleToken", err)
	}
}

func TestWriteReturnsOpResponses(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx := context.Background()
	g := etcdguard.New(cli)
	if _, err := cli.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []uint64{1, 1} { // on a new fence, then on an existing one
		resp, err := g.Write(ctx, "r", tok, clientv3.OpGet("a"), clientv3.OpPut("b", "2"))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Responses) != 2 {
			t.Fatalf("%d responses, want 2 (the caller's ops only)", len(resp.Responses))
		}
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Value) != "1" {
			t.Errorf("the Get's response: %v", resp.Responses[0])
		}
		if resp.Responses[1].GetResponsePut() == nil {
			t.Errorf("the Put's response: %v", resp.Responses[1])
		}
	}
	// With a Drop, the fence is deleted instead of raised: the responses
	// are still the ops' own, the Drop's among them.
	resp, err := g.Write(ctx, "r", 1, clientv3.OpDelete("b"), g.Drop("r"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Responses) != 2 || resp.Responses[0].GetResponseDeleteRange().GetDeleted() != 1 ||
		resp.Responses[1].GetResponseDeleteRange().GetDeleted() != 1 {
		t.Errorf("a Write with a Drop: responses %v, want the two deletes, one key each", resp.Responses)
	}
}

func TestRefusesWritesToFences(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx := context.Background()
	g := etcdguard.New(cli)
	for name, op := range map[string]clientv3.Op{
		"put a fence":                clientv3.OpPut("fencing-fence/r", "99999999999999999999"),
		"delete another fence":       clientv3.OpDelete("fencing-fence/other"),
		"another resource's Drop":    g.Drop("other"),
		"its Drop in a nested txn":   clientv3.OpTxn(nil, []clientv3.Op{g.Drop("r")}, nil),
		"its fence as a prefix":      clientv3.OpDelete("fencing-fence/r", clientv3.WithPrefix()),
		"delete the fence prefix":    clientv3.OpDelete("fencing-fence/", clientv3.WithPrefix()),
		"delete a range over it":     clientv3.OpDelete("a", clientv3.WithRange("g")),
		"delete everything from key": clientv3.OpDelete("a", clientv3.WithFromKey()),
		"in a nested txn":            clientv3.OpTxn(nil, nil, []clientv3.Op{clientv3.OpDelete("fencing-fence/x")}),
	} {
		if _, err := g.Write(ctx, "r", 1, op); !errors.Is(err, guard.ErrInvalidWrite) {
			t.Errorf("%s: got %v, want ErrInvalidWrite", name, err)
		}
	}
	for name, op := range map[string]clientv3.Op{
		"put beside the prefix":  clientv3.OpPut("fencing-fence", "x"),
		"delete a range below":   clientv3.OpDelete("a", clientv3.WithRange("fencing-fence/")),
		"delete from after it":   clientv3.OpDelete("fencing-fence0", clientv3.WithFromKey()),
		"get a fence (harmless)": clientv3.OpGet("fencing-fence/r"),
	} {
		if _, err := g.Write(ctx, "r", 1, op); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCountsStaleTokens(t *testing.T) {
	mp := metrictest.New(t)
	g := etcdguard.New(etcdtest.Client(t), etcdguard.WithPrefix("metrics-fence/"), etcdguard.WithMeterProvider(mp))
	ctx := context.Background()
	if err := g.Admit(ctx, "r", 7); err != nil {
		t.Fatalf("Admit 7: %v", err)
	}
	if err := g.Admit(ctx, "r", 6); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("Admit 6 after 7: %v, want ErrStaleToken", err)
	}
	if got := mp.Sum(t, guard.MetricStaleTokens); got != 1 {
		t.Fatalf("%s = %d, want 1", guard.MetricStaleTokens, got)
	}
}
