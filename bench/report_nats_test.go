package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/natsbackend"
	"github.com/fencing-go/fencing/natsbackend/natstest"
)

// natsSection compares the NATS backend, called through
// fencing.Coordinator, with what a NATS user would otherwise run, all on
// one nats-server of natstest's (a child process, JetStream with
// sync_interval: always, so every write is synced before its
// acknowledgement) over one connection, at 1 and 32 goroutines:
//
//   - nlock's pattern (github.com/akhenakh/nlock, whose module the Go proxy
//     does not serve, so rebuilt here from its lockmanager.go; see
//     nlockPattern): Create of the key with a UUID in a bucket with a TTL,
//     a keep-alive goroutine per lock, Delete naming the revision. Once on
//     the bucket nlock makes (memory storage: nothing synced) and once on
//     file storage, as ours.
//   - Floors: two KV Updates naming the revision (two compare-and-swap
//     writes on a kept entry: the least a grant and a release can be), and
//     KV Create+Delete (a Create over a delete marker is a refused write, a
//     read and a write in the jetstream package).
//
// Grant+Release runs again with every contender on a memory bucket (store
// "nats, memory buckets"): what the protocols cost without the syncs.
//
// CheckToken is compared with a KV Get (a direct get, which any server of
// the stream may answer) and a bare STREAM.MSG.GET (the leader read ours
// makes, without decoding the record).
func natsSection(t *testing.T, r *report) {
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	ctx := context.Background()
	coord := natsCoordinator(t, js, natstest.Bucket(t, js))
	file := natsKV(t, js, natstest.Bucket(t, js))
	grantRelease := func(store string, coord *fencing.Coordinator, nlockMem, nlockFile *nlockPattern, kv jetstream.KeyValue) {
		for _, g := range []int{1, 32} {
			keys := disjointKeys(g, 1)
			peerKey := func(w int) string { return fmt.Sprintf("g%d.w%02d", g, w) }
			c := &comparison{store: store, op: "Grant+Release", goroutines: g, contenders: []contender{{name: "ours", worker: grantReleaseWorker(coord, keys)}}}
			if nlockMem != nil {
				c.contenders = append(c.contenders, contender{name: "nlock's pattern (memory bucket, as nlock makes it)", worker: nlockMem.worker(peerKey)})
			}
			if nlockFile != nil {
				c.contenders = append(c.contenders, contender{name: "nlock's pattern (file bucket)", worker: nlockFile.worker(peerKey)})
			}
			c.contenders = append(c.contenders,
				contender{name: "2 KV Updates", worker: kvUpdatesWorker(t, kv, func(w int) string { return "u." + peerKey(w) })},
				contender{name: "KV Create+Delete", worker: kvCreateDeleteWorker(kv, func(w int) string { return "c." + peerKey(w) })})
			r.compare(t, c)
		}
	}
	nlockMem := newNlockPattern(t, js, jetstream.MemoryStorage)
	grantRelease("nats", coord, nlockMem, newNlockPattern(t, js, jetstream.FileStorage), file)
	// Every contender on memory storage (nothing synced): what the
	// protocols cost without the disk's syncs.
	mem := natsBucket(t, js, jetstream.MemoryStorage, 0)
	grantRelease("nats, memory buckets", natsCoordinator(t, js, natsBucket(t, js, jetstream.MemoryStorage, 0).Bucket()), nlockMem, nil, mem)

	for _, g := range []int{1, 32} {
		held, err := coord.Grant(ctx, fmt.Sprintf("checked/%d", g), leaseTTL)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("checked.%d", g)
		if _, err := file.Put(ctx, key, []byte("owner")); err != nil {
			t.Fatal(err)
		}
		msgGet := natsMsgGet(nc, file.Bucket(), key)
		r.compare(t, &comparison{
			store: "nats", op: "CheckToken", goroutines: g,
			contenders: []contender{
				{name: "ours", worker: func(int) func(int) error {
					return func(int) error {
						ok, err := coord.CheckToken(ctx, held.Key, held.Token)
						if err == nil && !ok {
							err = fmt.Errorf("token %d checked false", held.Token)
						}
						return err
					}
				}},
				{name: "KV Get (direct get)", worker: func(int) func(int) error {
					return func(int) error {
						_, err := file.Get(ctx, key)
						return err
					}
				}},
				{name: "STREAM.MSG.GET (leader read)", worker: func(int) func(int) error { return msgGet }},
			},
		})
	}
	r.notes = append(r.notes, fmt.Sprintf("NATS section: nats-server %s (natstest: a child process, JetStream file store "+
		"with sync_interval: always), R1 buckets with history 1, one connection for all contenders, loopback. "+
		"nlock's pattern is rebuilt from its lockmanager.go (its module is not on the Go proxy): a bucket with a TTL, "+
		"Create of the key with a UUID, a keep-alive goroutine per lock, Delete naming the revision.", nc.ConnectedServerVersion()))
}

// natsKV returns the key-value bucket named bucket.
func natsKV(t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	return kv
}

// natsBucket creates a bucket with history 1 on storage, with a TTL
// (MaxAge) unless ttl is 0.
func natsBucket(t *testing.T, js jetstream.JetStream, storage jetstream.StorageType, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: "bench_" + uuid.NewString()[:8], TTL: ttl, History: 1, Storage: storage,
	})
	if err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return kv
}

// natsCoordinator returns a Coordinator over a NATS backend on bucket, the
// safety check skipped (one server: R1 buckets, some on memory storage).
func natsCoordinator(t *testing.T, js jetstream.JetStream, bucket string) *fencing.Coordinator {
	t.Helper()
	be, err := natsbackend.New(context.Background(), js, bucket, natsbackend.WithSafetyCheck(backend.CheckSkip),
		natsbackend.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatalf("natsbackend.New: %v", err)
	}
	t.Cleanup(func() { be.Close() })
	return fencing.New(be)
}

// kvUpdatesWorker writes each worker's key twice per operation, each an
// Update naming the revision the last one returned: the two
// compare-and-swap writes a grant and a release cannot do without.
func kvUpdatesWorker(t *testing.T, kv jetstream.KeyValue, key func(w int) string) func(w int) func(int) error {
	var mu sync.Mutex
	revs := map[string]uint64{}
	return func(w int) func(int) error {
		ctx := context.Background()
		k := key(w)
		mu.Lock()
		rev, ok := revs[k]
		mu.Unlock()
		if !ok {
			var err error
			if rev, err = kv.Put(ctx, k, []byte("free")); err != nil {
				t.Fatal(err)
			}
		}
		return func(int) error {
			var err error
			if rev, err = kv.Update(ctx, k, []byte("held"), rev); err != nil {
				return err
			}
			if rev, err = kv.Update(ctx, k, []byte("free"), rev); err != nil {
				return err
			}
			mu.Lock()
			revs[k] = rev
			mu.Unlock()
			return nil
		}
	}
}

// kvCreateDeleteWorker creates each worker's key and deletes it naming
// the revision Create returned.
func kvCreateDeleteWorker(kv jetstream.KeyValue, key func(w int) string) func(w int) func(int) error {
	return func(w int) func(int) error {
		ctx := context.Background()
		k := key(w)
		return func(int) error {
			rev, err := kv.Create(ctx, k, []byte("held"))
			if err != nil {
				return err
			}
			return kv.Delete(ctx, k, jetstream.LastRevision(rev))
		}
	}
}

// natsMsgGet returns a call of the JetStream API's STREAM.MSG.GET for the
// last message of key in bucket: the read natsbackend makes, answered by
// the stream's leader.
func natsMsgGet(nc *nats.Conn, bucket, key string) func(int) error {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	subject := "$JS.API.STREAM.MSG.GET.KV_" + bucket
	return func(int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		msg, err := nc.RequestWithContext(ctx, subject, req)
		if err != nil {
			return err
		}
		var resp struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return err
		}
		if resp.Error != nil {
			return fmt.Errorf("STREAM.MSG.GET: %s", resp.Error.Description)
		}
		return nil
	}
}

// nlockPattern is nlock's lock (github.com/akhenakh/nlock, lockmanager.go
// at 1ab7546): a bucket with history 1 and a TTL (MaxAge) that ends an
// abandoned lock; Acquire is Create of the key with a fresh UUID, then a
// keep-alive goroutine that Updates the key every TTL/3; Release stops the
// goroutine and Deletes the key naming the revision it holds. nlock makes
// its bucket on memory storage.
type nlockPattern struct {
	kv  jetstream.KeyValue
	ttl time.Duration
}

func newNlockPattern(t *testing.T, js jetstream.JetStream, storage jetstream.StorageType) *nlockPattern {
	t.Helper()
	return &nlockPattern{kv: natsBucket(t, js, storage, leaseTTL), ttl: leaseTTL}
}

// worker acquires and releases key(w) once per operation.
func (p *nlockPattern) worker(key func(w int) string) func(w int) func(int) error {
	return func(w int) func(int) error {
		ctx := context.Background()
		k := key(w)
		return func(int) error {
			rev, err := p.kv.Create(ctx, k, []byte(uuid.NewString()))
			if err != nil {
				return err
			}
			keepAlive, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(p.ttl / 3)
				defer tick.Stop()
				select {
				case <-keepAlive.Done():
				case <-tick.C: // never in a benchmark: a lock is held for one round trip
				}
			})
			stop()
			wg.Wait()
			return p.kv.Delete(ctx, k, jetstream.LastRevision(rev))
		}
	}
}
