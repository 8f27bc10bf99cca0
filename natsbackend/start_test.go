package natsbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/natsbackend"
	"github.com/fencing-go/fencing/natsbackend/natstest"
)

// TestSafetyCheck: New refuses a memory bucket, a bucket of one replica and
// a bucket with a TTL, naming each setting in a *SafetyError; CheckWarn
// goes on; a missing bucket or a nil JetStream is ErrInvalidConfig.
func TestSafetyCheck(t *testing.T) {
	srv := natstest.Shared(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mk := func(name string, cfg jetstream.KeyValueConfig) string {
		cfg.Bucket = name
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		return name
	}
	for _, tc := range []struct {
		bucket string
		want   []string
	}{
		{mk("safety_memory", jetstream.KeyValueConfig{Storage: jetstream.MemoryStorage}), []string{"storage is memory", "replicas is 1"}},
		{mk("safety_file", jetstream.KeyValueConfig{Storage: jetstream.FileStorage}), []string{"replicas is 1"}},
		{mk("safety_ttl", jetstream.KeyValueConfig{Storage: jetstream.FileStorage, TTL: time.Hour}), []string{"replicas is 1", "max age"}},
	} {
		_, err := natsbackend.New(ctx, js, tc.bucket)
		var se *natsbackend.SafetyError
		if !errors.As(err, &se) || !errors.Is(err, backend.ErrUnsafeStore) {
			t.Fatalf("New on %s: %v, want a *SafetyError wrapping ErrUnsafeStore", tc.bucket, err)
		}
		if len(se.Unsafe) != len(tc.want) {
			t.Fatalf("New on %s: unsafe %q, want %d settings %q", tc.bucket, se.Unsafe, len(tc.want), tc.want)
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(se.Unsafe[i], w) {
				t.Errorf("New on %s: unsafe[%d] = %q, want it to begin %q", tc.bucket, i, se.Unsafe[i], w)
			}
		}
		b, err := natsbackend.New(ctx, js, tc.bucket, natsbackend.WithSafetyCheck(backend.CheckWarn), natsbackend.WithLogger(quiet))
		if err != nil {
			t.Fatalf("New on %s with CheckWarn: %v", tc.bucket, err)
		}
		_ = b.Close()
	}
	if _, err := natsbackend.New(ctx, js, "no_such_bucket"); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Errorf("New on a missing bucket: %v, want ErrInvalidConfig", err)
	}
	if _, err := natsbackend.New(ctx, nil, "b"); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Errorf("New(nil): %v, want ErrInvalidConfig", err)
	}
	if _, err := natsbackend.New(ctx, js, ""); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Errorf("New with no bucket: %v, want ErrInvalidConfig", err)
	}
}

// TestUnreachable: New against a server that is gone fails with
// ErrUnreachable when its context ends.
func TestUnreachable(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	bucket := natstest.Bucket(t, js)
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := natsbackend.New(ctx, js, bucket); !errors.Is(err, backend.ErrUnreachable) {
		t.Fatalf("New with the server down: %v, want ErrUnreachable", err)
	}
}
