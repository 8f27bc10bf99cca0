package redisguard

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/internal/storeopt"
)

var (
	//go:embed fence.lua
	fenceLua string
	//go:embed write.lua
	writeLua string
	//go:embed run.lua
	runLua string

	writeScript = redis.NewScript(fenceLua + writeLua)

	// readScript returns KEYS[1] (nil for nothing): a Scripter has no GET.
	readScript = redis.NewScript(`return redis.call('GET', KEYS[1])`)

	// lowerScript sets KEYS[1] to ARGV[2] (deletes it for "0") if it holds
	// ARGV[1], and otherwise returns what it holds (false for nothing).
	lowerScript = redis.NewScript(`local fence = redis.call('GET', KEYS[1])
if fence ~= ARGV[1] then
	return {fence}
end
if ARGV[2] == '0' then
	redis.call('DEL', KEYS[1])
else
	redis.call('SET', KEYS[1], ARGV[2])
end
return 1`)
)

// DefaultPrefix is the prefix of the fence keys unless WithPrefix gives
// another.
const DefaultPrefix = "fencing-fence:"

// staleReply starts the error reply of a script that refused a stale token.
const staleReply = "FENCING_STALE"

// Guard fences resources whose data is in Redis. It is safe for concurrent
// use.
type Guard struct {
	client  redis.Scripter
	cluster bool
	prefix  string
	opts    storeopt.Shared
}

// Option configures a Guard.
type Option func(*Guard)

// WithPrefix sets the prefix of the fence keys (default DefaultPrefix). It
// should hold no braces, which would move the hash tag into the prefix.
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

// New returns a Guard on client: a *redis.Client, a *redis.ClusterClient, or
// any client that runs scripts. On a *redis.ClusterClient every written key
// must be in the fence's hash slot (see Tag). The Guard never closes client.
func New(client redis.Scripter, opts ...Option) *Guard {
	_, cluster := client.(*redis.ClusterClient)
	g := &Guard{client: client, cluster: cluster, prefix: DefaultPrefix}
	storeopt.Apply(g, &g.opts, "redisguard", opts)
	return g
}

var _ guard.Guard = (*Guard)(nil)

// Tag returns resource as a hash tag, "{" + resource + "}". Keys that start
// with it are in the hash slot of resource's fence on a Redis Cluster.
//
// A resource that starts with '}' has no tag ("{}" is none: Redis then
// hashes the whole key), so on a Cluster nothing can share its fence's
// slot; writes with it get a *CrossSlotError. Name resources otherwise.
func Tag(resource string) string { return "{" + resource + "}" }

// FenceKey returns the Redis key that holds resource's fence: the prefix
// followed by Tag(resource).
func (g *Guard) FenceKey(resource string) string { return g.prefix + Tag(resource) }

// Op is one write of Write: Set, HSet, Del or a Guard's Drop.
type Op struct {
	name string
	key  string
	args []any
}

// Set is SET key value.
func Set(key string, value any) Op { return Op{name: "SET", key: key, args: []any{value}} }

// HSet is HSET key field value [field value ...].
func HSet(key string, fieldValues ...any) Op {
	return Op{name: "HSET", key: key, args: fieldValues}
}

// Del is DEL key.
func Del(key string) Op { return Op{name: "DEL", key: key} }

// dropOp names the Op of Drop.
const dropOp = "DROP"

// Drop is the Op that deletes resource's fence, for a Write of resource
// that deletes the resource's keys: the script admits the token, runs every
// Op, then deletes the fence instead of raising it, so the fence goes with
// the resource or not at all.
//
//	tag := redisguard.Tag("orders/42")
//	err := g.Write(ctx, "orders/42", lease.Token,
//		redisguard.Del(tag+":total"), redisguard.Del(tag+":meta"), g.Drop("orders/42"))
//
// Once the fence is gone, any token is admitted on resource again, an old
// holder's too: drop a fence only with a resource that no late write can
// bring back ("Dropping a fence" in docs/guards.md). In a Write of another
// resource it is refused with an error wrapping guard.ErrInvalidWrite. Run
// has no Drop: delete a resource with Write.
func (g *Guard) Drop(resource string) Op { return Op{name: dropOp, key: g.FenceKey(resource)} }

// Admit raises resource's fence to token with no other write, or returns an
// error wrapping guard.ErrStaleToken.
func (g *Guard) Admit(ctx context.Context, resource string, token uint64) error {
	return g.Write(ctx, resource, token)
}

// Write applies ops, in order, in one script with raising resource's fence
// to token (or deleting it, when ops hold g.Drop(resource)). A token below
// the fence gets an error wrapping guard.ErrStaleToken and nothing is
// written. The script checks every operation before it applies the first
// (an HSET on a key that holds another type fails with WRONGTYPE), so a
// failed Write writes nothing and leaves the fence where it was.
//
// Keys under the fence prefix (but for resource's own Drop), an HSET
// without field-value pairs and, on a Cluster, keys outside the fence's
// hash slot (*CrossSlotError) are refused with an error wrapping
// guard.ErrInvalidWrite, and nothing is sent.
func (g *Guard) Write(ctx context.Context, resource string, token uint64, ops ...Op) error {
	fence := g.FenceKey(resource)
	keys := make([]string, 0, 1+len(ops))
	written := make([]string, 0, len(ops)) // the keys to check: all but the fence's
	args := []any{strconv.FormatUint(token, 10)}
	keys = append(keys, fence)
	for _, op := range ops {
		switch {
		case op.name == "HSET" && (len(op.args) == 0 || len(op.args)%2 != 0):
			return fmt.Errorf("%w: HSET needs field-value pairs, got %d arguments", guard.ErrInvalidWrite, len(op.args))
		case op.name == dropOp && op.key != fence:
			return fmt.Errorf("%w: a Drop of fence %s in a Write of resource %s", guard.ErrInvalidWrite, backend.QuoteKey(op.key), backend.QuoteKey(resource))
		case op.name != dropOp:
			written = append(written, op.key)
		}
		keys = append(keys, op.key)
		args = append(append(args, op.name, len(op.args)), op.args...)
	}
	if err := g.check(ctx, resource, token, written); err != nil {
		return err
	}
	_, err := g.run(ctx, writeScript, resource, token, keys, args)
	return err
}

// check applies the checks every script shares before it is sent.
func (g *Guard) check(ctx context.Context, resource string, token uint64, keys []string) error {
	if err := guard.CheckAdmit(resource, token); err != nil {
		return err
	}
	fenceSlot := slot(g.FenceKey(resource))
	for _, k := range keys {
		if strings.HasPrefix(k, g.prefix) {
			return fmt.Errorf("%w: key %s is under the fence prefix %q", guard.ErrInvalidWrite, backend.QuoteKey(k), g.prefix)
		}
		if g.cluster {
			if s := slot(k); s != fenceSlot {
				return &CrossSlotError{Key: k, Slot: s, FenceSlot: fenceSlot}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return g.opts.Mint.Check(ctx, resource, token)
}

// run runs script and turns a stale reply into guard.ErrStaleToken.
func (g *Guard) run(ctx context.Context, script *redis.Script, resource string, token uint64, keys []string, args []any) (any, error) {
	reply, err := script.Run(ctx, g.client, keys, args...).Result()
	if err == nil {
		return reply, nil
	}
	if redis.HasErrorPrefix(err, staleReply) {
		fence, perr := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(err.Error(), staleReply)), 10, 64)
		if perr == nil {
			return nil, g.opts.Metrics.Observe(ctx, guard.StaleError(resource, token, fence))
		}
		return nil, g.opts.Metrics.Observe(ctx, fmt.Errorf("%w: token %d", guard.ErrStaleToken, token))
	}
	return nil, fmt.Errorf("redisguard: %w", err)
}

// CrossSlotError is returned on a Redis Cluster for a key that is not in
// the hash slot of the resource's fence, so one script could not write both.
// Start the key with Tag(resource). It wraps guard.ErrInvalidWrite.
type CrossSlotError struct {
	Key             string
	Slot, FenceSlot int
}

func (e *CrossSlotError) Error() string {
	return fmt.Sprintf("%v: key %s is in hash slot %d, the fence in %d: start the key with the resource's hash tag, redisguard.Tag(resource)",
		guard.ErrInvalidWrite, backend.QuoteKey(e.Key), e.Slot, e.FenceSlot)
}

// Unwrap returns guard.ErrInvalidWrite.
func (e *CrossSlotError) Unwrap() error { return guard.ErrInvalidWrite }

// Script is a caller's Lua script that Run runs after the fence check.
type Script struct {
	script *redis.Script
}

// NewScript makes a Script from the body of a Lua script. The body sees its
// own KEYS and ARGV (the ones passed to Run; the fence and the token are
// taken off) and may return a reply, as a script's top level does; it is
// the body of a Lua function, so its locals are its own.
//
// The guard raises the fence after the body returns, and not if it raises
// an error or returns an error reply (redis.error_reply). Redis does not undo what a script wrote before an error, so a
// body should check everything before its first write, as the guard's own
// script does.
func NewScript(body string) *Script {
	return &Script{script: redis.NewScript(fenceLua + strings.Replace(runLua, "--[[BODY]]", body, 1))}
}

// Run runs s with keys and args in one script after the fence check, and
// raises resource's fence to token if s succeeds; it returns s's reply. A
// stale token gets an error wrapping guard.ErrStaleToken and s does not run.
// keys are checked as Write checks its keys. The body must touch only keys
// in keys, as on any Redis Cluster.
func (g *Guard) Run(ctx context.Context, resource string, token uint64, s *Script, keys []string, args ...any) (any, error) {
	if err := g.check(ctx, resource, token, keys); err != nil {
		return nil, err
	}
	all := append([]string{g.FenceKey(resource)}, keys...)
	return g.run(ctx, s.script, resource, token, all, append([]any{strconv.FormatUint(token, 10)}, args...))
}

// Fence returns resource's fence: the highest token admitted for it, or 0
// if none was.
func (g *Guard) Fence(ctx context.Context, resource string) (uint64, error) {
	if err := backend.CheckKey(resource); err != nil {
		return 0, err
	}
	v, err := readScript.Run(ctx, g.client, []string{g.FenceKey(resource)}).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("redisguard: read the fence of resource %s: %w", backend.QuoteKey(resource), err)
	}
	fence, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redisguard: the fence of resource %s is not a number: %w", backend.QuoteKey(resource), err)
	}
	return fence, nil
}

// LowerFence sets resource's fence to to if it is from, in one script, and
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
	reply, err := lowerScript.Run(ctx, g.client, []string{g.FenceKey(resource)}, strconv.FormatUint(from, 10), strconv.FormatUint(to, 10)).Result()
	if err != nil {
		return fmt.Errorf("redisguard: lower the fence of resource %s: %w", backend.QuoteKey(resource), err)
	}
	if found, ok := reply.([]any); ok {
		e := &guard.FenceChangedError{Resource: resource, From: from}
		if len(found) == 1 {
			if s, ok := found[0].(string); ok {
				e.Fence, _ = strconv.ParseUint(s, 10, 64)
			}
		}
		return e
	}
	return nil
}
