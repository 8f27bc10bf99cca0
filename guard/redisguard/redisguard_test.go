package redisguard_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/redisguard"
	"github.com/fencing-go/fencing/internal/testing/metrictest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/redis/go-redis/v9"
)

// harness makes guarded stores on one server or Cluster: each with its own
// fence prefix and value keys.
type harness struct {
	client redis.UniversalClient
	n      atomic.Int64
}

func (h *harness) NewGuardStore(ctx context.Context, t testing.TB) (conformance.GuardStore, error) {
	base := fmt.Sprintf("test:%d:", h.n.Add(1))
	return &store{
		Guard:  redisguard.New(h.client, redisguard.WithPrefix(base+"fence:")),
		client: h.client,
		values: base + "value:",
	}, nil
}

// store keeps one value per resource in a string key tagged with the
// resource, so it shares the fence's slot on a Cluster.
type store struct {
	*redisguard.Guard
	client redis.UniversalClient
	values string
}

func (s *store) key(resource string) string { return s.values + redisguard.Tag(resource) }

func (s *store) Write(ctx context.Context, resource string, token uint64, value string) error {
	return s.Guard.Write(ctx, resource, token, redisguard.Set(s.key(resource), value))
}

// FailedWrite sets the value and then HSETs the same key, which will hold a
// string by then: the script refuses before it writes anything.
func (s *store) FailedWrite(ctx context.Context, resource string, token uint64, value string) error {
	err := s.Guard.Write(ctx, resource, token, redisguard.Set(s.key(resource), value), redisguard.HSet(s.key(resource), "f", "v"))
	if err == nil {
		return errors.New("a SET then HSET of one key succeeded")
	}
	return err
}

// Drop deletes the value's key and the fence in one script.
func (s *store) Drop(ctx context.Context, resource string, token uint64) error {
	return s.Guard.Write(ctx, resource, token, redisguard.Del(s.key(resource)), s.Guard.Drop(resource))
}

// FailedDrop is a Drop whose script refuses before it writes anything: a
// SET then an HSET of one key.
func (s *store) FailedDrop(ctx context.Context, resource string, token uint64) error {
	k := s.key(resource)
	err := s.Guard.Write(ctx, resource, token, redisguard.Del(k), redisguard.Set(k, "x"), redisguard.HSet(k, "f", "v"), s.Guard.Drop(resource))
	if err == nil {
		return errors.New("a SET then HSET of one key succeeded")
	}
	return err
}

func (s *store) Read(ctx context.Context, resource string) (string, error) {
	v, err := s.client.Get(ctx, s.key(resource)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

func TestConformance(t *testing.T) {
	conformance.RunGuard(t, &harness{client: redistest.Start(t, redistest.Config{}).Client()})
}

func TestClusterConformance(t *testing.T) {
	conformance.RunGuard(t, &harness{client: redistest.StartCluster(t, redistest.Config{}).Client(t)})
}

func TestOps(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	c := srv.Client()
	ctx := context.Background()
	g := redisguard.New(c)
	if err := c.Set(ctx, "gone", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := g.Write(ctx, "r", 1,
		redisguard.Set("s", "v"),
		redisguard.HSet("h", "a", "1", "b", 2),
		redisguard.Del("gone"),
		redisguard.Set("later", "x"), redisguard.Del("later"), redisguard.HSet("later", "f", "v"), // a key changing type along the way
	)
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, "s").Val(); v != "v" {
		t.Errorf("s = %q", v)
	}
	if h := c.HGetAll(ctx, "h").Val(); h["a"] != "1" || h["b"] != "2" || len(h) != 2 {
		t.Errorf("h = %v", h)
	}
	if n := c.Exists(ctx, "gone").Val(); n != 0 {
		t.Errorf("gone still exists")
	}
	if v := c.HGet(ctx, "later", "f").Val(); v != "v" {
		t.Errorf("later.f = %q", v)
	}
	if v := c.Get(ctx, "fencing-fence:{r}").Val(); v != "1" {
		t.Errorf("fence = %q, want the token in decimal", v)
	}
	// An HSET on a string fails before anything is written.
	err = g.Write(ctx, "r", 2, redisguard.Set("s", "changed"), redisguard.HSet("s", "f", "v"))
	if err == nil || errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("HSET on a string: got %v, want WRONGTYPE", err)
	}
	if v := c.Get(ctx, "s").Val(); v != "v" {
		t.Errorf("s = %q after the failed write, want it unchanged", v)
	}
	if v := c.Get(ctx, "fencing-fence:{r}").Val(); v != "1" {
		t.Errorf("fence = %q after the failed write, want 1", v)
	}
	for name, op := range map[string]redisguard.Op{
		"HSET without pairs":   redisguard.HSet("h"),
		"HSET with a lone arg": redisguard.HSet("h", "a"),
		"a fence key":          redisguard.Set("fencing-fence:{other}", "99"),
		"another's Drop":       g.Drop("other"),
		"another guard's Drop": redisguard.New(c, redisguard.WithPrefix("elsewhere:")).Drop("r"),
	} {
		if err := g.Write(ctx, "r", 3, op); !errors.Is(err, guard.ErrInvalidWrite) {
			t.Errorf("%s: got %v, want ErrInvalidWrite", name, err)
		}
	}
}

// Tokens compare as decimal strings, never as Lua doubles: 2^53+1 is above
// 2^53 (equal as doubles), and the whole uint64 range works.
func TestTokenPrecision(t *testing.T) {
	c := redistest.Start(t, redistest.Config{}).Client()
	ctx := context.Background()
	g := redisguard.New(c)
	for _, c := range []struct{ high, low uint64 }{
		{1<<53 + 1, 1 << 53},
		{10, 9},
		{100, 99},
		{math.MaxUint64, math.MaxUint64 - 1},
	} {
		r := fmt.Sprint(c.high)
		if err := g.Admit(ctx, r, c.high); err != nil {
			t.Fatalf("Admit(%d): %v", c.high, err)
		}
		if err := g.Admit(ctx, r, c.low); !errors.Is(err, guard.ErrStaleToken) {
			t.Errorf("Admit(%d) after %d: got %v, want ErrStaleToken", c.low, c.high, err)
		}
		if err := g.Admit(ctx, r, c.high); err != nil {
			t.Errorf("Admit(%d) again: %v", c.high, err)
		}
	}
}

var incr = redisguard.NewScript(`
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n > 100 then
	return redis.error_reply('ERR too big')
end
return n
`)

func TestRun(t *testing.T) {
	c := redistest.Start(t, redistest.Config{}).Client()
	ctx := context.Background()
	g := redisguard.New(c)
	counter := redisguard.Tag("r") + ":n"
	n, err := g.Run(ctx, "r", 5, incr, []string{counter}, 7)
	if err != nil || n != int64(7) {
		t.Fatalf("Run: %v, %v; want 7", n, err)
	}
	if _, err := g.Run(ctx, "r", 4, incr, []string{counter}, 1); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("Run with token 4 after 5: got %v, want ErrStaleToken", err)
	}
	if v := c.Get(ctx, counter).Val(); v != "7" {
		t.Fatalf("counter %q after a stale Run, want 7 (the script must not run)", v)
	}
	// A script that fails leaves the fence where it was (but, Redis being
	// Redis, keeps what it wrote before the error).
	if _, err := g.Run(ctx, "r", 9, incr, []string{counter}, 1000); err == nil || errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("failing Run: got %v, want its error", err)
	}
	if err := g.Admit(ctx, "r", 6); err != nil {
		t.Fatalf("Admit(6) after a failed Run with 9: %v (the fence moved)", err)
	}
	if _, err := g.Run(ctx, "r", 1, incr, []string{"fencing-fence:{r}"}, 1); !errors.Is(err, guard.ErrInvalidWrite) {
		t.Fatalf("Run on the fence key: got %v, want ErrInvalidWrite", err)
	}
}

func TestClusterRefusesCrossSlotKeys(t *testing.T) {
	c := redistest.StartCluster(t, redistest.Config{}).Client(t)
	ctx := context.Background()
	g := redisguard.New(c)
	if err := g.Write(ctx, "orders/42", 1, redisguard.Set(redisguard.Tag("orders/42")+":total", "200")); err != nil {
		t.Fatalf("a tagged key: %v", err)
	}
	for _, key := range []string{"orders/42:total", "{orders/43}:total"} {
		err := g.Write(ctx, "orders/42", 1, redisguard.Set(key, "200"))
		var cross *redisguard.CrossSlotError
		if !errors.As(err, &cross) || cross.Key != key || cross.Slot == cross.FenceSlot || !errors.Is(err, guard.ErrInvalidWrite) {
			t.Errorf("key %q: got %v, want a *CrossSlotError", key, err)
		}
		if _, err := g.Run(ctx, "orders/42", 1, incr, []string{key}, 1); !errors.As(err, &cross) {
			t.Errorf("Run with key %q: got %v, want a *CrossSlotError", key, err)
		}
	}
	if v := c.Get(ctx, "orders/42:total").Val(); v != "" {
		t.Errorf("a refused write wrote %q", v)
	}
}

func TestCountsStaleTokens(t *testing.T) {
	mp := metrictest.New(t)
	g := redisguard.New(redistest.Start(t, redistest.Config{}).Client(), redisguard.WithMeterProvider(mp))
	ctx := context.Background()
	if err := g.Admit(ctx, "r", 7); err != nil {
		t.Fatalf("Admit 7: %v", err)
	}
	if err := g.Write(ctx, "r", 6, redisguard.Set(redisguard.Tag("r")+"v", "x")); !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("Write 6 after 7: %v, want ErrStaleToken", err)
	}
	if got := mp.Sum(t, guard.MetricStaleTokens); got != 1 {
		t.Fatalf("%s = %d, want 1", guard.MetricStaleTokens, got)
	}
}
