package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// pastReadKV is the backend's KV, except that before each of its first n
// reads at a past revision it calls before.
type pastReadKV struct {
	clientv3.KV
	n      atomic.Int32
	before func(context.Context) error
}

func (k *pastReadKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if clientv3.OpGet(key, opts...).Rev() > 0 && k.n.Add(-1) >= 0 {
		if err := k.before(ctx); err != nil {
			return nil, err
		}
	}
	return k.KV.Get(ctx, key, opts...)
}

// refusedBackend returns a backend on a prefix of its own, closed in
// cleanup, and a context for its calls.
func refusedBackend(t *testing.T, cli *clientv3.Client) (*Backend, context.Context) {
	t.Helper()
	b, err := New(context.Background(), cli, WithPrefix(fmt.Sprintf("refused-test/%d/", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return b, ctx
}

// TestRefusedAnswersAsTxnSaw: a refused grant or release is answered from
// the records as its Txn saw them, not as they are when it reads them: a
// grant refused while the key was held gets a HeldError although the
// holder released just after the Txn.
func TestRefusedAnswersAsTxnSaw(t *testing.T) {
	cli := etcdtest.Client(t)
	b, ctx := refusedBackend(t, cli)
	if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "A", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	kv := &pastReadKV{KV: b.kv, before: func(ctx context.Context) error { return b.Release(ctx, "k", "A") }}
	kv.n.Store(1)
	b.kv = kv
	_, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "B", Timeout: time.Minute})
	if !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("grant refused while held, read after a release: %v, want ErrLeaseHeld", err)
	}
	if kv.n.Load() > 0 {
		t.Fatal("the refused grant read no past revision")
	}
}

// TestRefusedAnswersAfterCompaction: a refused grant or release reads the
// records as its Txn saw them; when a compaction has discarded that
// revision, it tries again and still gives the right answer.
func TestRefusedAnswersAfterCompaction(t *testing.T) {
	m := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, m.Endpoints())
	b, ctx := refusedBackend(t, cli)
	// Before the read, a write and a compaction up to it: the read finds
	// its revision compacted away.
	ckv := &pastReadKV{KV: b.kv, before: func(ctx context.Context) error {
		put, err := cli.Put(ctx, "refused-test/other", "x")
		if err == nil {
			_, err = cli.Compact(ctx, put.Header.Revision)
		}
		return err
	}}
	b.kv = ckv
	r := func(key, id string) backend.Request {
		return backend.Request{Key: key, LeaseID: id, Timeout: time.Minute}
	}
	a, err := b.Grant(ctx, r("k", "A"))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		call func() error
		want error
	}{
		{"grant of a held key", func() error { _, err := b.Grant(ctx, r("k", "B")); return err }, backend.ErrLeaseHeld},
		{"resent grant", func() error {
			l, err := b.Grant(ctx, r("k", "A"))
			if err == nil && l.Token != a.Token {
				t.Errorf("resent grant: token %d, want %d", l.Token, a.Token)
			}
			return err
		}, nil},
		{"release of another lease", func() error { return b.Release(ctx, "k", "B") }, backend.ErrLeaseNotFound},
		{"release", func() error { return b.Release(ctx, "k", "A") }, nil},
		{"resent release", func() error { return b.Release(ctx, "k", "A") }, nil},
		{"grant resent after release", func() error { _, err := b.Grant(ctx, r("k", "A")); return err }, backend.ErrLeaseNotFound},
	}
	for _, s := range steps {
		ckv.n.Store(1)
		if err := s.call(); !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", s.name, err, s.want)
		}
		if n := ckv.n.Load(); n > 0 && s.name != "release" {
			t.Errorf("%s: read no past revision", s.name)
		}
	}
}

// TestGrantAfterIDRecordDeleted: a key this backend has granted is granted
// with one comparison of its ID record; once that record is deleted by hand,
// the grant's Txn is refused, and the grant goes through as a nested Txn.
func TestGrantAfterIDRecordDeleted(t *testing.T) {
	cli := etcdtest.Client(t)
	b, ctx := refusedBackend(t, cli)
	r := func(id string) backend.Request { return backend.Request{Key: "k", LeaseID: id, Timeout: time.Minute} }
	a, err := b.Grant(ctx, r("A"))
	if err != nil {
		t.Fatal(err)
	}
	if !b.known.has("k") {
		t.Fatal("a granted key is not known")
	}
	if err := b.Release(ctx, "k", "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, b.keys("k").id); err != nil {
		t.Fatal(err)
	}
	l, err := b.Grant(ctx, r("B"))
	if err != nil {
		t.Fatalf("grant after the ID record was deleted: %v", err)
	}
	if l.Token <= a.Token {
		t.Fatalf("token %d after %d", l.Token, a.Token)
	}
	if !b.known.has("k") {
		t.Fatal("a granted key is not known")
	}
}

// TestKnownKeysBounded: the hint forgets every key once it would hold more
// than knownMax.
func TestKnownKeysBounded(t *testing.T) {
	var k knownKeys
	for i := range knownMax {
		k.add(fmt.Sprint(i))
	}
	if !k.has("0") || !k.has(fmt.Sprint(knownMax-1)) {
		t.Fatal("a key added was forgotten before the bound")
	}
	k.add("one more")
	if k.has("0") || !k.has("one more") {
		t.Fatal("the hint did not start afresh past its bound")
	}
	k.remove("one more")
	if k.has("one more") {
		t.Fatal("a removed key is still known")
	}
}
