package etcdguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/internal/storeopt"
)

// DefaultPrefix is the prefix of the fence keys unless WithPrefix gives
// another.
const DefaultPrefix = "fencing-fence/"

// Guard fences resources whose data is in etcd. It is safe for concurrent
// use.
type Guard struct {
	cli    *clientv3.Client
	prefix string
	opts   storeopt.Shared
}

// Option configures a Guard.
type Option func(*Guard)

// WithPrefix sets the prefix of the fence keys (default DefaultPrefix).
// Keep it apart from the keys your operations write: writes under it are
// refused (with an empty prefix, every write is).
func WithPrefix(prefix string) Option { return func(g *Guard) { g.prefix = prefix } }

// WithMeterProvider counts the writes the Guard refuses for a stale token on
// mp (guard.MetricStaleTokens; without this option the global provider, a
// no-op until an OpenTelemetry SDK is installed; a nil mp records nothing).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(g *Guard) { g.opts.SetMeterProvider(mp) }
}

// WithMintCheck makes the Guard refuse a token the lock store never minted,
// with an error wrapping guard.ErrNotMinted, before it sends anything (see
// guard.MintCheck). Use it when tokens come from the network.
func WithMintCheck(mc *guard.MintCheck) Option { return func(g *Guard) { g.opts.Mint = mc } }

// New returns a Guard on cli. The Guard never closes cli.
func New(cli *clientv3.Client, opts ...Option) *Guard {
	g := &Guard{cli: cli, prefix: DefaultPrefix}
	storeopt.Apply(g, &g.opts, "etcdguard", opts)
	return g
}

var _ guard.Guard = (*Guard)(nil)

// FenceKey returns the etcd key that holds resource's fence.
func (g *Guard) FenceKey(resource string) string { return g.prefix + resource }

// Admit raises resource's fence to token with no other write, or returns an
// error wrapping guard.ErrStaleToken.
func (g *Guard) Admit(ctx context.Context, resource string, token uint64) error {
	_, err := g.Write(ctx, resource, token)
	return err
}

// Write applies ops in one Txn with raising resource's fence to token (or
// deleting it, when ops hold g.Drop(resource)). When token is below the
// fence it returns an error wrapping guard.ErrStaleToken and applies
// nothing. When ops write under the fence prefix (but for resource's own
// Drop, among ops themselves) it returns an error wrapping
// guard.ErrInvalidWrite and sends nothing.
//
// The response has the Txn's header and, in Responses, the responses to ops
// alone, in order, as if ops had been the whole Txn.
func (g *Guard) Write(ctx context.Context, resource string, token uint64, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := guard.CheckAdmit(resource, token); err != nil {
		return nil, err
	}
	key, val := g.FenceKey(resource), encode(token)
	drop := false
	for _, op := range ops {
		drop = drop || g.isDrop(op, key)
	}
	if err := g.checkOps(ops, key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := g.opts.Mint.Check(ctx, resource, token); err != nil {
		return nil, err
	}
	admit := append([]clientv3.Op{clientv3.OpPut(key, val)}, ops...)
	if drop {
		admit = ops // the Drop among them deletes the fence instead
	}
	resp, err := g.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(key), "=", 0)).
		Then(admit...).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), ">", val)},
			[]clientv3.Op{clientv3.OpGet(key)},
			admit,
		)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdguard: txn: %w", err)
	}
	responses := resp.Responses
	if !resp.Succeeded {
		inner := resp.Responses[0].GetResponseTxn()
		if inner.Succeeded {
			return nil, g.opts.Metrics.Observe(ctx, stale(resource, token, inner))
		}
		responses = inner.Responses
	}
	if !drop {
		responses = responses[1:]
	}
	return &clientv3.TxnResponse{Header: resp.Header, Succeeded: true, Responses: responses}, nil
}

// Drop returns the operation that deletes resource's fence, to put in the
// Txn that deletes the resource's keys, so the fence goes with the resource
// or not at all. In a Write of resource it replaces the fence's raise: the
// token is admitted, then the resource and its fence are deleted.
//
//	_, err := g.Write(ctx, "orders/42", lease.Token,
//		clientv3.OpDelete("orders/42/", clientv3.WithPrefix()), g.Drop("orders/42"))
//
// In a Txn of your own it deletes the fence with no token check. Once the
// fence is gone, any token is admitted on resource again, an old holder's
// too: drop a fence only with a resource that no late write can bring back
// ("Dropping a fence" in docs/guards.md). A Write of another resource
// refuses it with an error wrapping guard.ErrInvalidWrite, as it refuses
// any write under the fence prefix.
func (g *Guard) Drop(resource string) clientv3.Op { return clientv3.OpDelete(g.FenceKey(resource)) }

// isDrop reports whether op is the Drop of the fence key fence.
func (g *Guard) isDrop(op clientv3.Op, fence string) bool {
	return op.IsDelete() && string(op.KeyBytes()) == fence && len(op.RangeBytes()) == 0
}

// stale returns the error for token refused, reading the fence from the Get
// in the stale branch.
func stale(resource string, token uint64, inner *etcdserverpb.TxnResponse) error {
	if kvs := inner.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		if fence, err := strconv.ParseUint(string(kvs[0].Value), 10, 64); err == nil {
			return guard.StaleError(resource, token, fence)
		}
	}
	return fmt.Errorf("%w: token %d", guard.ErrStaleToken, token)
}

// Fence returns resource's fence: the highest token admitted for it, or 0
// if none was. It reads linearizably.
func (g *Guard) Fence(ctx context.Context, resource string) (uint64, error) {
	if err := backend.CheckKey(resource); err != nil {
		return 0, err
	}
	resp, err := g.cli.Get(ctx, g.FenceKey(resource))
	if err != nil {
		return 0, fmt.Errorf("etcdguard: read the fence of resource %s: %w", backend.QuoteKey(resource), err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	fence, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcdguard: the fence of resource %s is not a number: %w", backend.QuoteKey(resource), err)
	}
	return fence, nil
}

// LowerFence sets resource's fence to to if it is from, in one Txn, and
// otherwise returns a *guard.FenceChangedError (wrapping
// guard.ErrFenceChanged) and changes nothing: the break-glass for a fence
// raised by a token that should never have been admitted (see
// docs/guards.md). to must be below from; 0 clears the fence.
//
// A lowered fence admits tokens it refused before: lower it only after
// every holder of the tokens between to and from has stopped.
func (g *Guard) LowerFence(ctx context.Context, resource string, from, to uint64) error {
	if err := guard.CheckLower(resource, from, to); err != nil {
		return err
	}
	key := g.FenceKey(resource)
	op := clientv3.OpPut(key, encode(to))
	if to == 0 {
		op = clientv3.OpDelete(key)
	}
	resp, err := g.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", encode(from))).
		Then(op).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdguard: lower the fence of resource %s: %w", backend.QuoteKey(resource), err)
	}
	if resp.Succeeded {
		return nil
	}
	e := &guard.FenceChangedError{Resource: resource, From: from}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		e.Fence, _ = strconv.ParseUint(string(kvs[0].Value), 10, 64)
	}
	return e
}

// encode writes token as 20 zero-padded decimal digits, so that byte order
// is numeric order.
func encode(token uint64) string { return fmt.Sprintf("%020d", token) }

var errFenceWrite = errors.New("an operation writes under the fence prefix")

// checkOps refuses puts and deletes (at any depth of nested Txns) whose keys
// meet the fence prefix, but for the Drop of the fence key drop at the top
// level ("" for none).
func (g *Guard) checkOps(ops []clientv3.Op, drop string) error {
	for _, op := range ops {
		switch {
		case drop != "" && g.isDrop(op, drop):
		case op.IsTxn():
			_, then, els := op.Txn()
			if err := g.checkOps(then, ""); err != nil {
				return err
			}
			if err := g.checkOps(els, ""); err != nil {
				return err
			}
		case op.IsPut() || op.IsDelete():
			if g.meetsPrefix(op.KeyBytes(), op.RangeBytes()) {
				return fmt.Errorf("%w: %w %q", guard.ErrInvalidWrite, errFenceWrite, g.prefix)
			}
		}
	}
	return nil
}

// meetsPrefix reports whether the key range [key, end) (a single key when
// end is empty, every key from key on when end is "\x00") holds a key that
// starts with the prefix.
func (g *Guard) meetsPrefix(key, end []byte) bool {
	p := []byte(g.prefix)
	pEnd := []byte(clientv3.GetPrefixRangeEnd(g.prefix)) // "\x00": no end
	beforeEnd := func(k []byte) bool { return bytes.Equal(pEnd, []byte{0}) || bytes.Compare(k, pEnd) < 0 }
	if len(end) == 0 {
		return bytes.HasPrefix(key, p)
	}
	if bytes.Equal(end, []byte{0}) { // from key on
		return beforeEnd(key)
	}
	return bytes.Compare(key, end) < 0 && beforeEnd(key) && bytes.Compare(end, p) > 0
}
