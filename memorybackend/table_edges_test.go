package memorybackend

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// oneShard returns a backend whose keys all share one shard, so that the
// index's 32-bit tags of a few tens of thousands of keys collide.
func oneShard() *Backend {
	b := New()
	b.shards = make([]shard, 1)
	b.shardShift = 64 // every hash >> 64 is shard 0
	return b
}

// tagCollision returns two keys whose hashes under b's seed agree in the
// 32 bits the index keeps.
func tagCollision(t *testing.T, b *Backend) (string, string) {
	t.Helper()
	seen := make(map[uint32]string, 1<<17)
	for i := range 1 << 22 {
		k := fmt.Sprintf("key-%d", i)
		tag := uint32(maphash.String(b.keySeed, k))
		if other, ok := seen[tag]; ok {
			return other, k
		}
		seen[tag] = k
	}
	t.Fatal("no tag collision among 4M keys")
	return "", ""
}

func grantOK(t *testing.T, b *Backend, key, id string) backend.Lease {
	t.Helper()
	l, err := b.Grant(context.Background(), backend.Request{Key: key, LeaseID: id, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("Grant(%q): %v", key, err)
	}
	return l
}

// Two keys whose index tags are equal stay two keys: each has its own
// lease and tokens, and ending one leaves the other.
func TestTagCollisionKeysDistinct(t *testing.T) {
	b := oneShard()
	a, c := tagCollision(t, b)
	la := grantOK(t, b, a, "lease-a")
	lc := grantOK(t, b, c, "lease-c")
	if la.Token != 1 || lc.Token != 1 {
		t.Fatalf("tokens %d and %d for two fresh keys with equal tags, want 1 each", la.Token, lc.Token)
	}
	if err := b.Release(context.Background(), a, "lease-a"); err != nil {
		t.Fatalf("Release(%q): %v", a, err)
	}
	if tok, live, _ := b.Token(context.Background(), c); !live || tok != 1 {
		t.Fatalf("%q after releasing %q (equal tags): token %d, live %v; want 1, live", c, a, tok, live)
	}
	if l := grantOK(t, b, a, "lease-a2"); l.Token != 2 {
		t.Fatalf("%q re-granted with token %d, want 2", a, l.Token)
	}
}

// Many releases followed by many grants reuse the freed live-lease slots,
// each once: every lease keeps its own slot.
func TestFreedSlotsReusedOnce(t *testing.T) {
	b := oneShard()
	ctx := context.Background()
	const n = 64
	ids := map[string]string{}
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		ids[k] = "first-" + k
		grantOK(t, b, k, ids[k])
	}
	for i := 0; i < n; i += 2 {
		k := fmt.Sprintf("k%d", i)
		if err := b.Release(ctx, k, ids[k]); err != nil {
			t.Fatalf("Release(%q): %v", k, err)
		}
		delete(ids, k)
	}
	for i := range n / 2 {
		k := fmt.Sprintf("new%d", i)
		ids[k] = "second-" + k
		grantOK(t, b, k, ids[k])
	}
	for k, id := range ids {
		l, err := b.Renew(ctx, backend.Request{Key: k, LeaseID: id, Timeout: time.Minute})
		if err != nil || l.LeaseID != id {
			t.Errorf("Renew(%q) of its live lease: %+v, %v", k, l, err)
		}
	}
	if got := len(b.shards[0].live); got != n {
		t.Errorf("%d live-lease slots for %d live leases after reuse, want %d", got, len(ids), n)
	}
}

// Grants racing on one key never hand out two live leases or one token
// twice. Unlike the race detector, this fails whenever the shard's lock
// does not make each operation atomic.
func TestRacingGrantsOneHolder(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := context.Background()
	const goroutines, rounds = 8, 20000
	var (
		holders atomic.Int32
		bad     atomic.Int32
		mu      sync.Mutex
		tokens  = map[uint64]bool{}
		wg      sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("g%d-r%d", g, r)
				l, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: id, Timeout: time.Minute})
				if err != nil {
					continue
				}
				if holders.Add(1) != 1 {
					bad.Add(1)
				}
				mu.Lock()
				if tokens[l.Token] {
					bad.Add(1)
				}
				tokens[l.Token] = true
				mu.Unlock()
				holders.Add(-1)
				if err := b.Release(ctx, "k", id); err != nil {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d times two holders at once, a token issued twice, or a holder's release refused (%d grants)", n, len(tokens))
	}
}
