package memorybackend_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// driverLeases numbers the driving key's lease IDs.
var driverLeases atomic.Int64

// drive makes n grants and releases on one key of its own, the calls on
// other keys that run the reclaiming sweep.
func drive(t testing.TB, b *memorybackend.Backend, n int) {
	t.Helper()
	for range n {
		id := fmt.Sprintf("driver-%d", driverLeases.Add(1))
		mustGrant(t, b, "driver", id)
		mustRelease(t, b, "driver", id)
	}
}

func records(t testing.TB, b *memorybackend.Backend) int64 {
	t.Helper()
	st, err := b.Size(context.Background())
	if err != nil {
		t.Fatalf("Size: %v", err)
	}
	return st.Records
}

// TestRetentionBoundary: a released key is kept while it has been idle for
// less than the retention, however many sweeps run (a resent release is
// still recognised), and reclaimed by the sweeps once the retention and a
// pass interval (retention/8) have passed.
func TestRetentionBoundary(t *testing.T) {
	ctx := context.Background()
	const d = time.Minute
	clock := memorybackend.NewFakeClock(epoch)
	b := memorybackend.New(memorybackend.WithClock(clock), memorybackend.WithRetention(d))
	defer b.Close()
	mustRelease(t, b, "k", mustGrant(t, b, "k", "a").LeaseID)
	for range 7 {
		clock.Advance(d / 8)
		drive(t, b, 100)
	}
	clock.Advance(d/8 - 1) // a nanosecond before the retention ends
	drive(t, b, 100)
	if err := b.Release(ctx, "k", "a"); err != nil {
		t.Fatalf("a release resent within the retention, after the sweeps: %v, want nil", err)
	}
	clock.Advance(d/8 + 1)
	drive(t, b, 100)
	if err := b.Release(ctx, "k", "a"); !errors.Is(err, backend.ErrLeaseNotFound) {
		t.Errorf("a release resent after the retention: %v, want ErrLeaseNotFound (reclaimed)", err)
	}
	if n := records(t, b); n != 1 {
		t.Errorf("%d records, want 1 (the driving key)", n)
	}
	if l := mustGrant(t, b, "k", "b"); l.Token <= 1 {
		t.Errorf("the next grant after the reclaim: token %d, want above 1", l.Token)
	}
}

// TestRetentionKeepsBusyKeys: neither a live lease nor a lock delay is
// reclaimed, however long it lasts; a lease in a lock delay is idle only
// from the delay's end.
func TestRetentionKeepsBusyKeys(t *testing.T) {
	ctx := context.Background()
	const d = time.Second
	clock := memorybackend.NewFakeClock(epoch)
	b := memorybackend.New(memorybackend.WithClock(clock), memorybackend.WithRetention(d))
	defer b.Close()
	live, err := b.Grant(ctx, backend.Request{Key: "live", LeaseID: "a", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	delayed := backend.Request{Key: "delayed", LeaseID: "a", Timeout: 10 * time.Second, LockDelay: 20 * time.Second}
	if _, err := b.Grant(ctx, delayed); err != nil {
		t.Fatal(err)
	}
	for i := range 31*8 - 1 { // to a nanosecond before the delayed key's retention ends
		clock.Advance(d / 8)
		drive(t, b, 10)
		if i == 15*8 { // expired, in its lock delay
			var held *backend.HeldError
			if _, err := b.Grant(ctx, backend.Request{Key: "delayed", LeaseID: "b", Timeout: time.Second}); !errors.As(err, &held) || !held.Delayed {
				t.Fatalf("a grant in the lock delay, after sweeps: %v, want a Delayed HeldError", err)
			}
		}
	}
	clock.Advance(d/8 - 1)
	drive(t, b, 100)
	if tok, ok, err := b.Token(ctx, "live"); err != nil || !ok || tok != live.Token {
		t.Errorf("Token of a live lease = %d, %v, %v; want %d, live", tok, ok, err, live.Token)
	}
	if _, err := b.Grant(ctx, delayed); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Errorf("a grant resent within the retention after the lock delay: %v, want ErrLeaseExpired (kept)", err)
	}
	clock.Advance(d/8 + 1)
	drive(t, b, 100)
	if l, err := b.Grant(ctx, delayed); err != nil || l.Token <= 1 {
		t.Errorf("a grant resent after the retention: token %d, %v; want a new lease above token 1 (reclaimed)", l.Token, err)
	}
}

// TestRetentionZero: WithRetention(0) keeps every record for ever.
func TestRetentionZero(t *testing.T) {
	ctx := context.Background()
	clock := memorybackend.NewFakeClock(epoch)
	b := memorybackend.New(memorybackend.WithClock(clock), memorybackend.WithRetention(0))
	defer b.Close()
	mustRelease(t, b, "k", mustGrant(t, b, "k", "a").LeaseID)
	clock.Advance(1000 * time.Hour)
	drive(t, b, 1000)
	if err := b.Release(ctx, "k", "a"); err != nil {
		t.Errorf("a release resent 1000 h later: %v, want nil (kept)", err)
	}
	if n := records(t, b); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
}

// TestRetentionCompactionKeepsLiveLeases reclaims most of the keys of every
// shard, so the shards are compacted (their records move), while other
// keys hold live leases: each live lease must still be found, renewed and
// released through its key, and one that expires must be ended by a later
// grant's sweep (which finds its record from the lease) as expired.
func TestRetentionCompactionKeepsLiveLeases(t *testing.T) {
	ctx := context.Background()
	const d = time.Second
	clock := memorybackend.NewFakeClock(epoch)
	b := memorybackend.New(memorybackend.WithClock(clock), memorybackend.WithRetention(d))
	defer b.Close()
	const held, churned = 1000, 20_000
	tokens := make([]uint64, held)
	for i := range churned {
		key := fmt.Sprintf("churn/%d", i)
		mustRelease(t, b, key, mustGrant(t, b, key, "x").LeaseID)
		if i%(churned/held) == 0 {
			l, err := b.Grant(ctx, backend.Request{Key: fmt.Sprintf("held/%d", i/(churned/held)), LeaseID: "h", Timeout: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			tokens[i/(churned/held)] = l.Token
		}
	}
	clock.Advance(d + d/8)
	for i := 0; records(t, b) > held+1; i++ {
		if i > 10_000 {
			t.Fatalf("%d records after %d grants on another key; want %d", records(t, b), i, held+1)
		}
		drive(t, b, 1)
	}
	for i, tok := range tokens {
		key := fmt.Sprintf("held/%d", i)
		if got, ok, err := b.Token(ctx, key); err != nil || !ok || got != tok {
			t.Fatalf("Token(%q) after compaction = %d, %v, %v; want %d, live", key, got, ok, err, tok)
		}
		if i%2 == 0 {
			continue // left to expire
		}
		if l, err := b.Renew(ctx, backend.Request{Key: key, LeaseID: "h", Timeout: time.Hour}); err != nil || l.Token != tok {
			t.Fatalf("Renew(%q) after compaction = %d, %v; want token %d", key, l.Token, err, tok)
		}
		mustRelease(t, b, key, "h")
	}
	clock.Advance(time.Hour - d/2) // past the leases' end, within the retention
	for i := range churned {       // each grant ends one other expired lease in its shard
		mustGrant(t, b, fmt.Sprintf("later/%d", i), "x")
	}
	for i := 0; i < held; i += 2 {
		key := fmt.Sprintf("held/%d", i)
		if _, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: "h", Timeout: time.Hour}); !errors.Is(err, backend.ErrLeaseExpired) {
			t.Fatalf("Grant(%q) resent after its lease expired: %v, want ErrLeaseExpired", key, err)
		}
	}
}

// TestRetentionMemory churns 10^6 distinct keys (10^5 with the race
// detector; each granted and released once), lets the retention pass and drives the sweep with grants on one
// other key: the heap must come back to under 12 bytes per reclaimed key
// (the maps and arenas are rebuilt when they have shrunk). docs/memory.md
// quotes its log.
func TestRetentionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("churns 10^6 keys")
	}
	n := 1_000_000
	if raceEnabled {
		n = 100_000 // ten times slower per call: a tenth of the keys keeps it under a minute
	}
	const d = time.Second
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	clock := memorybackend.NewFakeClock(epoch)
	before := heap()
	b := memorybackend.New(memorybackend.WithClock(clock), memorybackend.WithRetention(d))
	defer b.Close()
	ids := []string{"lease-a", "lease-b"}
	for i := range n {
		key := fmt.Sprintf("orders/%08d", i) // 15 bytes
		mustGrant(t, b, key, ids[i&1])
		mustRelease(t, b, key, ids[i&1])
	}
	peak := heap()
	clock.Advance(d + d/8)
	grants := 0
	for records(t, b) > 1 {
		if grants > n {
			t.Fatalf("%d records after %d grants on another key", records(t, b), grants)
		}
		drive(t, b, 100)
		grants += 100
	}
	after := heap()
	runtime.KeepAlive(b)
	perKey := (float64(after) - float64(before)) / float64(n)
	t.Logf("%d keys: heap %+.1f MB churned, %+.1f MB after the retention and %d grants on another key: %.2f B per reclaimed key",
		n, (float64(peak)-float64(before))/1e6, (float64(after)-float64(before))/1e6, grants, perKey)
	if perKey >= 12 {
		t.Errorf("%.2f B of heap per reclaimed key, want under 12", perKey)
	}
}

// TestRetentionConcurrentChurn: goroutines churn keys of their own on the
// system clock with a retention of 100 µs, so the passes reclaim and
// compact shards while other goroutines grant, hold and release in them:
// each key's tokens must strictly increase across its reclaims, and a
// lease held through several passes must stay live with its token.
func TestRetentionConcurrentChurn(t *testing.T) {
	ctx := context.Background()
	b := memorybackend.New(memorybackend.WithRetention(100 * time.Microsecond))
	defer b.Close()
	const workers, keys = 4, 300
	rounds := 300
	if raceEnabled {
		rounds = 60
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			last := make([]uint64, keys)
			for r := range rounds {
				for k := range keys {
					held := k%50 == 0 // granted every tenth round, held through the passes of ten
					if held && r%10 != 0 {
						continue
					}
					key := fmt.Sprintf("w%d/k%d", w, k)
					id := fmt.Sprintf("r%d", r)
					l, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: time.Hour})
					if err != nil {
						t.Errorf("Grant(%q): %v", key, err)
						return
					}
					if l.Token <= last[k] {
						t.Errorf("Grant(%q): token %d, not above %d, its token before: reissued", key, l.Token, last[k])
						return
					}
					last[k] = l.Token
					if held {
						continue
					}
					if err := b.Release(ctx, key, id); err != nil {
						t.Errorf("Release(%q): %v", key, err)
						return
					}
				}
				for k := 0; k < keys; k += 50 {
					key := fmt.Sprintf("w%d/k%d", w, k)
					if tok, live, err := b.Token(ctx, key); err != nil || !live || tok != last[k] {
						t.Errorf("Token(%q) of a lease held since round %d = %d, %v, %v; want %d, live", key, r-r%10, tok, live, err, last[k])
						return
					}
					if r%10 == 9 {
						if err := b.Release(ctx, key, fmt.Sprintf("r%d", r-9)); err != nil {
							t.Errorf("Release(%q): %v", key, err)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	st, err := b.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Reclaimed == 0 {
		t.Fatalf("no key reclaimed in %d grants: the test tested nothing", workers*keys*rounds)
	}
	t.Logf("%d keys reclaimed, %d records left", st.Reclaimed, st.Records)
}
