package etcdbackend_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// retained is the retention of these tests: the shortest accepted.
const retained = time.Second

// giveUp is how long past the retention a test waits for a sweep before it
// fails: the documented bound (retention + 2×retention/16 + two passes) on a
// host whose passes take seconds.
const giveUp = 10*retained + 30*time.Second

// waitUntil polls cond until it holds, failing t after giveUp.
func waitUntil(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > giveUp {
			t.Fatalf("after %v: still not %s", giveUp, what)
		}
		time.Sleep(retained / 20)
	}
	return time.Since(start)
}

// reclaimed returns b's count of reclaimed keys.
func reclaimed(t *testing.T, b *etcdbackend.Backend) uint64 {
	t.Helper()
	st, err := b.Size(context.Background())
	if err != nil {
		t.Fatalf("Size: %v", err)
	}
	return st.Reclaimed
}

// TestRetentionGrantRacesReclaim: a grant that lands between a pass's read
// (which found the key idle past the retention) and its delete wins: the
// delete does not happen, the new lease stands, and once that lease is
// released the key is reclaimed, its next token above the racing one.
func TestRetentionGrantRacesReclaim(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx := context.Background()
	prefix := newPrefix("reclaim-race")
	other, err := newWithPrefix(cli, prefix) // its own retention is 24 h: it only grants
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })

	var (
		raced    atomic.Bool
		racing   backend.Lease
		raceErr  error
		afterRun = make(chan struct{}, 1)
	)
	beforeTxn := func(deletes int) {
		if deletes > 0 && !raced.Load() {
			racing, raceErr = other.Grant(ctx, req("k", "B", 30*time.Second))
			raced.Store(true)
		}
	}
	afterPass := func() {
		if raced.Load() {
			select {
			case afterRun <- struct{}{}:
			default:
			}
		}
	}
	b, err := etcdbackend.New(ctx, cli, etcdbackend.WithPrefix(prefix), etcdbackend.WithRetention(retained),
		etcdbackend.WithSweepHooks(beforeTxn, afterPass))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	first := mustGrant(t, b, req("k", "A", 2*time.Second))
	if err := b.Release(ctx, "k", "A"); err != nil {
		t.Fatal(err)
	}
	took := waitUntil(t, "a pass deciding to reclaim the key", raced.Load)
	if raceErr != nil {
		t.Fatalf("the racing Grant: %v", raceErr)
	}
	<-afterRun // the pass that raced is over
	t.Logf("a pass decided to reclaim the key %v after its release; a grant raced in", took.Round(time.Millisecond))
	if racing.Token <= first.Token {
		t.Fatalf("racing token %d not above the first %d", racing.Token, first.Token)
	}
	wantToken(t, b, "k", racing.Token, true)
	if n := reclaimed(t, b); n != 0 {
		t.Fatalf("Reclaimed = %d after a pass whose delete a grant raced; want 0", n)
	}
	if _, err := b.Renew(ctx, req("k", "B", 30*time.Second)); err != nil {
		t.Fatalf("Renew of the lease that raced the reclaim: %v", err)
	}

	// Released, the key goes after all, and leaves nothing.
	if err := other.Release(ctx, "k", "B"); err != nil {
		t.Fatalf("Release of the lease that raced the reclaim: %v", err)
	}
	took = waitUntil(t, "reclaimed after its release", func() bool { return reclaimed(t, b) == 1 })
	t.Logf("reclaimed %v after the release", took.Round(time.Millisecond))
	if n, err := userKeys(ctx, cli, prefix); err != nil || n != 0 {
		t.Fatalf("keys left under the prefix after the reclaim: %d, %v; want none", n, err)
	}
	if got := mustGrant(t, b, req("k", "C", 2*time.Second)); got.Token <= racing.Token {
		t.Fatalf("token after the reclaim %d, not above %d: a token reissued", got.Token, racing.Token)
	}
}

// TestRetentionKeepsBusyKeys: a key that is held, in a lock delay, or has a
// line entry is not reclaimed however long it stays so, and one whose lease
// expired (nothing written at its end) is reclaimed by the sweep alone.
func TestRetentionKeepsBusyKeys(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx := context.Background()
	prefix := newPrefix("reclaim-busy")
	b, err := etcdbackend.New(ctx, cli, etcdbackend.WithPrefix(prefix), etcdbackend.WithRetention(retained))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	held := mustGrant(t, b, req("held", "H", time.Minute))
	delayed := req("delayed", "D", time.Second)
	delayed.LockDelay = time.Minute
	mustGrant(t, b, delayed)
	if _, err := b.Enqueue(ctx, "lined", "W", time.Minute); err != nil {
		t.Fatal(err)
	}
	expired := mustGrant(t, b, req("expired", "E", time.Second))

	// The expired key: reclaimed with no call on it.
	took := waitUntil(t, "the expired key reclaimed", func() bool { return reclaimed(t, b) == 1 })
	t.Logf("the expired key was reclaimed %v after its grant", took.Round(time.Millisecond))
	enc := base64.RawURLEncoding.EncodeToString
	resp, err := cli.Get(ctx, prefix+enc([]byte("expired"))+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("records of the reclaimed key: %v, %v; want none", resp, err)
	}
	if err := b.Release(ctx, "expired", "E"); !errors.Is(err, backend.ErrLeaseNotFound) {
		t.Fatalf("Release of the reclaimed key's old lease: %v, want ErrLeaseNotFound", err)
	}
	if got := mustGrant(t, b, req("expired", "E2", time.Minute)); got.Token <= expired.Token {
		t.Fatalf("token after the reclaim %d, not above %d", got.Token, expired.Token)
	}

	// The others stay, several retentions on (the lock delay outlives the
	// lease by a minute: the wait ends well inside it).
	time.Sleep(4 * retained)
	if n := reclaimed(t, b); n != 1 {
		t.Fatalf("Reclaimed = %d; want 1: a busy key was reclaimed", n)
	}
	wantToken(t, b, "held", held.Token, true)
	st, err := b.Inspect(ctx, "delayed")
	if err != nil || st.DelayRemaining == 0 {
		t.Fatalf("Inspect of the delayed key = %+v, %v; want it in its lock delay", st, err)
	}
	if n, err := b.LineLength(ctx, "lined"); err != nil || n != 1 {
		t.Fatalf("LineLength of the lined key = %d, %v; want 1", n, err)
	}
}

// TestRetentionStoreSize churns distinct keys (each granted and released
// once) on a member of its own through a backend whose retention is off,
// then lets a backend with a retention of a second sweep the prefix, and
// reports the etcd keys under the prefix and the member's database size
// (after a compaction and a defragmentation) at each step. It churns
// $FENCING_ETCD_CHURN keys (default 2,000; docs/etcd.md has 10^5).
func TestRetentionStoreSize(t *testing.T) {
	n := 2000
	if s := os.Getenv("FENCING_ETCD_CHURN"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("FENCING_ETCD_CHURN=%q: %v", s, err)
		}
	}
	m := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, m.Endpoints())
	ctx := context.Background()
	const prefix = "fencing/"
	size := func(what string) (keys, db int64) {
		t.Helper()
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Fatalf("compact: %v", err)
		}
		if _, err := cli.Defragment(ctx, m.ClientURL); err != nil {
			t.Fatalf("defragment: %v", err)
		}
		st, err := cli.Status(ctx, m.ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d etcd keys under the prefix; database %.2f MB (%d bytes), in use %d bytes", what, resp.Count, float64(st.DbSize)/1e6, st.DbSize, st.DbSizeInUse)
		return resp.Count, st.DbSize
	}
	_, base := size("before")

	off, err := etcdbackend.New(ctx, cli, etcdbackend.WithPrefix(prefix), etcdbackend.WithRetention(0))
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	start := time.Now()
	const workers = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				key := fmt.Sprintf("orders/%08d", i) // 15 bytes
				id := fmt.Sprintf("lease-%08d", i)
				if _, err := off.Grant(ctx, req(key, id, 10*time.Second)); err != nil {
					t.Errorf("Grant(%q): %v", key, err)
					return
				}
				if err := off.Release(ctx, key, id); err != nil {
					t.Errorf("Release(%q): %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("churned %d keys in %v (%d goroutines)", n, time.Since(start).Round(time.Millisecond), workers)
	keys, churned := size(fmt.Sprintf("after %d keys, retention off", n))
	if keys != 2*int64(n) {
		t.Fatalf("%d etcd keys after churning %d keys; want 2 a key", keys, n)
	}

	start = time.Now()
	on, err := etcdbackend.New(ctx, cli, etcdbackend.WithPrefix(prefix), etcdbackend.WithRetention(retained))
	if err != nil {
		t.Fatal(err)
	}
	defer on.Close()
	for {
		st, err := on.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Records == 0 {
			t.Logf("reclaimed %d keys in %v after a backend with a retention of %v was made", st.Reclaimed, time.Since(start).Round(time.Millisecond), retained)
			break
		}
		if time.Since(start) > giveUp+time.Duration(n)*time.Millisecond {
			t.Fatalf("%v after a backend with a retention of %v was made, %d etcd keys left", time.Since(start), retained, st.Records)
		}
		time.Sleep(retained / 4)
	}
	keys, after := size("after the retention")
	if keys != 0 {
		t.Fatalf("%d etcd keys left", keys)
	}
	t.Logf("per key: %.0f bytes before the retention, %.2f after", float64(churned-base)/float64(n), float64(after-base)/float64(n))
}

// BenchmarkRetention grants and releases a new key each time, through a
// backend whose retention is off, the default (24 h: no key is swept
// during the benchmark), and a second (a pass every 62.5 ms marks and
// deletes the keys of a second before, on the same server), after a
// warm-up of 200. Run each variant in a process of its own, in rounds in
// a rotating order, for interleaved figures (docs/etcd.md).
func BenchmarkRetention(b *testing.B) {
	cli := etcdtest.Client(b)
	for _, c := range []struct {
		name string
		d    time.Duration
	}{{"Off", 0}, {"Default", etcdbackend.DefaultRetention}, {"Second", time.Second}} {
		b.Run(c.name, func(b *testing.B) {
			be, err := etcdbackend.New(context.Background(), cli, etcdbackend.WithPrefix(newPrefix("bench-retention")), etcdbackend.WithRetention(c.d))
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			ctx := context.Background()
			i := 0
			for ; i < 200; i++ { // warm-up: connections, the pool of etcd leases
				key := "warm-up/" + strconv.Itoa(i)
				if _, err := be.Grant(ctx, req(key, "L", 10*time.Second)); err != nil {
					b.Fatal(err)
				}
				if err := be.Release(ctx, key, "L"); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				key := "orders/" + strconv.Itoa(i)
				if _, err := be.Grant(ctx, req(key, "L", 10*time.Second)); err != nil {
					b.Fatal(err)
				}
				if err := be.Release(ctx, key, "L"); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
