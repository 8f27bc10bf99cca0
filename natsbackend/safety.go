package natsbackend

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/backend"
)

// SafetyError is New's error in backend.CheckRefuse when the bucket's
// stream has a setting that can lose an acknowledged write or drop a live
// record. It wraps backend.ErrUnsafeStore.
//
// What New sees is the stream's configuration: its storage (memory loses
// everything on a restart), its replicas (one replica loses what the
// server had not synced to disk when it crashed, unless the server runs
// with jetstream { sync_interval: always }, which no client can see), its
// MaxAge (a record removed by age ends a live lease and loses the key's
// token floor), and a mirror or sources (a bucket that copies another is
// not where writes are decided). The server's sync_interval is not
// visible to a client: New never knows it, logs a warning saying so when
// the rest passed (WithLogger), and docs/nats.md says what to set.
type SafetyError struct {
	// Unsafe lists each unsafe setting found, as "setting is ...: why".
	Unsafe []string
}

// Error implements error.
func (e *SafetyError) Error() string {
	return fmt.Sprintf("natsbackend: %v: %s (see docs/nats.md; WithSafetyCheck(backend.CheckWarn) runs anyway)",
		backend.ErrUnsafeStore, strings.Join(e.Unsafe, "; "))
}

// Unwrap returns backend.ErrUnsafeStore.
func (e *SafetyError) Unwrap() error { return backend.ErrUnsafeStore }

// syncUnseen is what New logs when the bucket passed its check: the one
// setting it cannot see. With the default sync_interval (2 minutes) a crash
// of the servers holding a majority of the replicas can lose acknowledged
// writes, and with them tokens (Jepsen, NATS 2.12.1).
const syncUnseen = "natsbackend: cannot see the servers' jetstream sync_interval: unless every server runs with sync_interval: always, a crash of a majority of the bucket's replicas can lose acknowledged writes and tokens can go back (docs/nats.md)"

// probe reads the bucket's stream configuration and judges it.
func (b *Backend) probe(ctx context.Context) error {
	st, err := b.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("natsbackend: bucket %q: %w", b.bucket, connErr(err))
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return fmt.Errorf("natsbackend: bucket %q: %w: no stream information", b.bucket, backend.ErrUnreachable)
	}
	if unsafe := judgeConfig(bs.StreamInfo().Config); len(unsafe) > 0 {
		return &SafetyError{Unsafe: unsafe}
	}
	return nil
}

// judgeConfig lists what in c can lose a token or a live lease.
func judgeConfig(c jetstream.StreamConfig) []string {
	var unsafe []string
	if c.Storage == jetstream.MemoryStorage {
		unsafe = append(unsafe, "storage is memory: a server restart loses every record, and tokens start again (create the bucket with FileStorage)")
	}
	if c.Replicas <= 1 {
		unsafe = append(unsafe, "replicas is 1: a crash loses what the server had not synced (use 3 replicas; a single server needs jetstream { sync_interval: always }, which a client cannot see)")
	}
	if c.MaxAge > 0 {
		unsafe = append(unsafe, fmt.Sprintf("max age (TTL) is %v: a record removed by age ends a live lease (create the bucket with no TTL)", c.MaxAge))
	}
	if c.Mirror != nil || len(c.Sources) > 0 {
		unsafe = append(unsafe, "the bucket mirrors or sources another: writes are not decided here (use the origin bucket)")
	}
	return unsafe
}
