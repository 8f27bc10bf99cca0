package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// startCluster starts a three-master cluster whose nodes pass the default
// configuration check (append-only file, fsync every second).
func startCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	return redistest.StartCluster(t, redistest.Config{AppendOnly: true, AppendFsync: "everysec"})
}

func newClusterBackend(ctx context.Context, t testing.TB, client redis.UniversalClient, prefix string, opts ...redisbackend.Option) *redisbackend.Backend {
	t.Helper()
	opts = append([]redisbackend.Option{
		redisbackend.WithPrefix(prefix),
		redisbackend.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)
	b, err := redisbackend.New(ctx, client, opts...)
	if err != nil {
		t.Fatalf("redisbackend.New on the cluster: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestCluster runs every cluster test on one cluster (starting one takes
// about two seconds); each uses key prefixes of its own.
func TestCluster(t *testing.T) {
	c := startCluster(t)
	t.Run("Conformance", func(t *testing.T) {
		// Every key's record lives on one master, whose clock decides to the
		// microsecond, so the standalone harness's traits hold.
		conformance.Run(t, &harness{client: c.Client(t), name: "cluster"})
	})
	t.Run("OddKeys", func(t *testing.T) { testClusterOddKeys(t, c) })
	t.Run("OneSlotPerKey", func(t *testing.T) { testClusterOneSlotPerKey(t, c) })
	t.Run("MinReplicasWithoutReplicas", func(t *testing.T) { testClusterMinReplicasWithoutReplicas(t, c) })
	t.Run("NotifyOnKeyShard", func(t *testing.T) { testClusterNotifyOnKeyShard(t, c) })
	t.Run("ListEveryMaster", func(t *testing.T) { testClusterListEveryMaster(t, c) })
	t.Run("LineOnKeyShard", func(t *testing.T) { testClusterLineOnKeyShard(t, c) })
	t.Run("ManyCrossSlot", func(t *testing.T) { testClusterManyCrossSlot(t, c) })
	t.Run("FloorInRecordSlot", func(t *testing.T) { testClusterFloorInRecordSlot(t, c) })
}

// testClusterFloorInRecordSlot: the floor a key's grant reads and its
// reclaim raises is in the slot of the key's record, as Redis computes it,
// whatever the prefix: without braces, with a hash tag (one slot), with a
// '{' it does not close.
func testClusterFloorInRecordSlot(t *testing.T, c *redistest.Cluster) {
	client := c.Client(t)
	ctx := context.Background()
	for _, prefix := range []string{"floor:", "{pinned}:", "open{x:"} {
		b := newClusterBackend(ctx, t, client, prefix)
		for i := range 50 {
			k := fmt.Sprintf("key-%d", i)
			want, err := client.ClusterKeySlot(ctx, b.RedisKey(k)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got, err := client.ClusterKeySlot(ctx, b.FloorKey(k)).Result(); err != nil || got != want {
				t.Fatalf("prefix %q: the floor %q of %q is in slot %d (%v), its record in %d", prefix, b.FloorKey(k), k, got, err, want)
			}
		}
	}
}

// testClusterLineOnKeyShard: on every master, a key's line keys share the
// record's slot, and the dequeue script's SPUBLISH on the next waiter's
// channel (in that slot too) reaches it.
func testClusterLineOnKeyShard(t *testing.T, c *redistest.Cluster) {
	client := c.Client(t)
	b := newClusterBackend(context.Background(), t, client, "line:")
	ctx := context.Background()
	for _, ks := range keysPerMaster(t, c, client, b, 1) {
		k := ks[0]
		sub := mustTurn(t, b, k, "b")
		mustEnqueue(t, b, k, "a", time.Minute)
		wantAhead(t, mustEnqueue(t, b, k, "b", time.Minute), 1, "b on "+k)
		want, err := client.ClusterKeySlot(ctx, b.RedisKey(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(b.RedisKey(k), ":token")
		for _, rk := range []string{base + ":line", base + ":due"} {
			if slot, err := client.ClusterKeySlot(ctx, rk).Result(); err != nil || slot != want {
				t.Fatalf("%s is in slot %d (%v), the record in %d", rk, slot, err, want)
			}
		}
		mustDequeue(t, b, k, "a")
		wantWake(t, sub, "for b after a left the line of "+k)
		wantAhead(t, mustEnqueue(t, b, k, "b", time.Minute), 0, "b on "+k)
	}
}

// keysPerMaster returns n keys for each master of c, as the backend b
// stores them.
func keysPerMaster(t *testing.T, c *redistest.Cluster, client *redis.ClusterClient, b *redisbackend.Backend, n int) [][]string {
	t.Helper()
	ctx := context.Background()
	keys := make([][]string, len(c.Masters))
	for i := 0; ; i++ {
		k := fmt.Sprintf("key-%d", i)
		slot, err := client.ClusterKeySlot(ctx, b.RedisKey(k)).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		m := int(slot) * len(c.Masters) / 16384 // StartCluster gives each a third
		if len(keys[m]) < n {
			keys[m] = append(keys[m], k)
		}
		done := true
		for _, ks := range keys {
			done = done && len(ks) == n
		}
		if done {
			return keys
		}
	}
}

// testClusterNotifyOnKeyShard: on a Cluster a waiter's channel is
// subscribed (SSUBSCRIBE) on the master that owns the key's slot and no
// other, one pub/sub connection per master carries every key there, and
// the release script's SPUBLISH reaches it.
func testClusterNotifyOnKeyShard(t *testing.T, c *redistest.Cluster) {
	client := c.Client(t)
	b := newClusterBackend(context.Background(), t, client, "notify:")
	keys := keysPerMaster(t, c, client, b, 2)
	masters := make([]*redis.Client, len(c.Masters))
	for i, m := range c.Masters {
		masters[i] = m.Client()
	}
	subs := make(map[string]backend.Subscription)
	for _, ks := range keys {
		for _, k := range ks {
			subs[k] = mustNotify(t, b, k)
		}
	}
	for owner, ks := range keys {
		for _, k := range ks {
			for i, m := range masters {
				want := int64(0)
				if i == owner {
					want = 1
				}
				if n := numSub(t, m, true, channelOf(b, k)); n != want {
					t.Fatalf("master %d counts %d shard subscribers of %q (owned by master %d), want %d", i, n, k, owner, want)
				}
			}
			mustGrant(t, b, k, "id")
			mustRelease(t, b, k, "id")
			wantWake(t, subs[k], "after the release of "+k)
		}
		list, err := masters[owner].ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(list, "flags=P"); n != 1 {
			t.Fatalf("master %d has %d pub/sub connections for %d keys, want 1", owner, n, len(ks))
		}
	}
}

// testClusterListEveryMaster: List scans every master, a page at a time,
// and returns each key once.
func testClusterListEveryMaster(t *testing.T, c *redistest.Cluster) {
	client := c.Client(t)
	ctx := context.Background()
	b := newClusterBackend(ctx, t, client, "list:")
	keys := keysPerMaster(t, c, client, b, 3)
	want := make(map[string]bool)
	for _, ks := range keys {
		for _, k := range ks {
			mustGrant(t, b, k, "id")
			want[k] = true
		}
	}
	got := make(map[string]bool)
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := b.List(ctx, "key-", cursor, 2)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(page) > 2 || pages > 20 {
			t.Fatalf("page %d has %d keys (limit 2)", pages, len(page))
		}
		for _, ki := range page {
			if got[ki.Key] || !want[ki.Key] || !ki.State.Live {
				t.Fatalf("List returned %+v (seen before: %v, wanted: %v)", ki, got[ki.Key], want[ki.Key])
			}
			got[ki.Key] = true
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(got) != len(want) {
		t.Fatalf("List returned %d keys, want %d", len(got), len(want))
	}
}

// oddKeys are keys that could collide or be split over slots by a careless
// encoding: hash-tag braces, separators, the suffix the backend appends,
// bytes that are not UTF-8, and the longest key.
var oddKeys = []string{
	"{", "}", ":", "{}", "}{", "{{}}", "{a}", "a{b}c", "{a}b", "a{}b", "{a}{b}",
	"a", "a:", ":a", "a:token", "}:token", "{a}:token", "fencing:", "cluster:{x}",
	"\x00", "\xff\xfe", "é", " ", "*", "?[]",
	strings.Repeat("{", backend.MaxKeyLength), strings.Repeat("}", backend.MaxKeyLength),
}

// testClusterOddKeys runs a whole lease lifecycle on every odd key through
// the cluster client (any CROSSSLOT error or shared record fails it), and
// checks that every key has its own token sequence.
func testClusterOddKeys(t *testing.T, c *redistest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	coord := fencing.New(newClusterBackend(ctx, t, c.Client(t), "odd:"))

	first := make(map[string]fencing.Lease)
	for _, k := range oddKeys {
		l, err := coord.Grant(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("Grant(%q): %v", k, err)
		}
		if l.Token != 1 {
			t.Fatalf("Grant(%q) token %d, want 1: the key shares a record with another key", k, l.Token)
		}
		first[k] = l
	}
	for _, k := range oddKeys {
		l := first[k]
		if ok, err := coord.CheckToken(ctx, k, l.Token); err != nil || !ok {
			t.Fatalf("CheckToken(%q, %d) = %v, %v; want true", k, l.Token, ok, err)
		}
		if _, err := coord.Renew(ctx, k, l.ID, time.Minute); err != nil {
			t.Fatalf("Renew(%q): %v", k, err)
		}
		if err := coord.Release(ctx, k, l.ID); err != nil {
			t.Fatalf("Release(%q): %v", k, err)
		}
		if _, live, err := coord.Token(ctx, k); err != nil || live {
			t.Fatalf("Token(%q) after release: live %v, %v", k, live, err)
		}
	}
	for _, k := range oddKeys {
		l, err := coord.Grant(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("second Grant(%q): %v", k, err)
		}
		if l.Token != 2 {
			t.Fatalf("second Grant(%q) token %d, want 2", k, l.Token)
		}
	}
}

// testClusterOneSlotPerKey checks that everything the backend stores for
// one user key lands in one hash slot, and that different keys spread over
// the masters. Each user key gets a backend with a prefix of its own, so
// that a scan of every master for that prefix finds exactly the Redis keys
// the backend wrote for it, whatever their names.
func testClusterOneSlotPerKey(t *testing.T, c *redistest.Cluster) {
	client := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	masters := make([]*redis.Client, len(c.Masters))
	for i, m := range c.Masters {
		masters[i] = m.Client()
	}
	mastersUsed := make(map[string]bool)
	for i, k := range oddKeys {
		prefix := fmt.Sprintf("slot%d:", i)
		coord := fencing.New(newClusterBackend(ctx, t, client, prefix))
		// Grant, release and grant again, so every record the backend keeps
		// for a key (live lease, released lease, token counter) exists.
		l, err := coord.Grant(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("Grant(%q): %v", k, err)
		}
		if err := coord.Release(ctx, k, l.ID); err != nil {
			t.Fatalf("Release(%q): %v", k, err)
		}
		if _, err := coord.Grant(ctx, k, time.Minute); err != nil {
			t.Fatalf("second Grant(%q): %v", k, err)
		}

		slots := make(map[int64][]string)
		var owners []string
		for j, m := range c.Masters {
			keys, err := scanAll(ctx, masters[j], prefix+"*")
			if err != nil {
				t.Fatalf("SCAN %s: %v", m.Addr(), err)
			}
			if len(keys) > 0 {
				owners = append(owners, m.Addr())
			}
			for _, rk := range keys {
				slot, err := client.ClusterKeySlot(ctx, rk).Result()
				if err != nil {
					t.Fatalf("CLUSTER KEYSLOT %q: %v", rk, err)
				}
				slots[slot] = append(slots[slot], rk)
			}
		}
		if len(slots) != 1 || len(owners) != 1 {
			t.Fatalf("key %q: records in %d slots on masters %v, want one slot: %v", k, len(slots), owners, slots)
		}
		mastersUsed[owners[0]] = true
	}
	if len(mastersUsed) < 2 {
		t.Errorf("all %d keys landed on %v: the test did not exercise the cluster", len(oddKeys), mastersUsed)
	}
}

// scanAll returns every key on one node that matches pattern.
func scanAll(ctx context.Context, c *redis.Client, pattern string) ([]string, error) {
	var all []string
	iter := c.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		all = append(all, iter.Val())
	}
	return all, iter.Err()
}

// testClusterMinReplicasWithoutReplicas checks the WAIT path through a
// cluster client: the cluster has no replicas, so a grant that asks for one
// takes effect on its master but reports ErrReplication, never success.
func testClusterMinReplicasWithoutReplicas(t *testing.T, c *redistest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newClusterBackend(ctx, t, c.Client(t), "wait:", redisbackend.WithMinReplicas(1, 50*time.Millisecond))
	for _, k := range []string{"a", "b", "c", "{", "}"} {
		req := backend.Request{Key: k, LeaseID: "lease-" + k, Timeout: time.Minute, Margin: time.Second}
		_, err := b.Grant(ctx, req)
		if !errors.Is(err, redisbackend.ErrReplication) || !errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("Grant(%q) = %v; want ErrReplication and ErrOutcomeUnknown", k, err)
		}
		// The write stays on the master: the key is held by that lease.
		if tok, live, err := b.Token(ctx, k); err != nil || !live || tok != 1 {
			t.Fatalf("Token(%q) = %d, %v, %v; want 1, live", k, tok, live, err)
		}
		// A resend with the same lease ID waits again, and mints nothing.
		if _, err := b.Grant(ctx, req); !errors.Is(err, redisbackend.ErrReplication) {
			t.Fatalf("resent Grant(%q) = %v; want ErrReplication", k, err)
		}
		if tok, _, _ := b.Token(ctx, k); tok != 1 {
			t.Fatalf("Token(%q) = %d after a resend, want 1", k, tok)
		}
	}
}

// testClusterManyCrossSlot: GrantMany over keys in different slots is
// refused with ErrCrossSlot and takes nothing; with a hash tag in the
// prefix, the same keys are granted together.
func testClusterManyCrossSlot(t *testing.T, c *redistest.Cluster) {
	client := c.Client(t)
	ctx := context.Background()
	b := newClusterBackend(ctx, t, client, "many:")
	perMaster := keysPerMaster(t, c, client, b, 1)
	keys := []string{perMaster[0][0], perMaster[1][0]}
	reqs := []backend.Request{
		{Key: keys[0], LeaseID: "m-1", Timeout: time.Minute},
		{Key: keys[1], LeaseID: "m-1", Timeout: time.Minute},
	}
	_, err := b.GrantMany(ctx, reqs)
	if !errors.Is(err, redisbackend.ErrCrossSlot) || !errors.Is(err, backend.ErrInvalidKey) {
		t.Fatalf("GrantMany on two masters: %v, want ErrCrossSlot", err)
	}
	for _, k := range keys {
		if _, live, err := b.Token(ctx, k); err != nil || live {
			t.Fatalf("Token(%q) after a refused GrantMany: live %v, %v", k, live, err)
		}
	}
	tagged := newClusterBackend(ctx, t, client, "{many}:")
	if _, err := tagged.GrantMany(ctx, reqs); err != nil {
		t.Fatalf("GrantMany under a hash-tagged prefix: %v", err)
	}
}
