package redisbackend_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// TestMinReplicas runs grants on a primary with one replica: while the
// replica acknowledges, grants succeed; once it is killed, a grant takes
// effect on the primary but reports an error that wraps both ErrReplication
// and ErrOutcomeUnknown, never plain success, also through a Coordinator
// that resends it.
func TestMinReplicas(t *testing.T) {
	rs := redistest.StartReplicated(t, redistest.Config{AppendOnly: true, AppendFsync: "everysec"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// WAIT's timeout must be shorter than the client's read timeout.
	client := rs.Primary.Client(func(o *redis.Options) { o.ReadTimeout = 5 * time.Second })
	newBackend := func(wait time.Duration) *redisbackend.Backend {
		b, err := redisbackend.New(ctx, client,
			redisbackend.WithPrefix("replicated:"),
			redisbackend.WithMinReplicas(1, wait),
			redisbackend.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	// While the replica is up, wait long enough for a busy machine (a replica
	// can lag by hundreds of milliseconds under load); once it is down, a
	// short wait keeps the test quick.
	patient, b := newBackend(3*time.Second), newBackend(300*time.Millisecond)
	replica := rs.Replica.Client()

	// The replica acknowledges: grant and renew succeed, and the replica
	// has the record as soon as they return.
	req := backend.Request{Key: "k", LeaseID: "lease-1", Timeout: time.Minute, Margin: time.Second}
	lease, err := patient.Grant(ctx, req)
	if err != nil {
		t.Fatalf("Grant with the replica up: %v", err)
	}
	if _, err := patient.Renew(ctx, req); err != nil {
		t.Fatalf("Renew with the replica up: %v", err)
	}
	if n, err := replica.Exists(ctx, patient.RedisKey("k")).Result(); err != nil || n != 1 {
		t.Fatalf("the replica lacks the record after an acknowledged grant: EXISTS = %d, %v", n, err)
	}
	if err := patient.Release(ctx, "k", lease.LeaseID); err != nil {
		t.Fatalf("Release: %v", err)
	}

	rs.Replica.Kill()

	// Grant: the primary writes, WAIT gets no acknowledgement.
	req = backend.Request{Key: "k", LeaseID: "lease-2", Timeout: time.Minute, Margin: time.Second}
	_, err = b.Grant(ctx, req)
	wantReplicationError(t, "Grant with the replica down", err)
	if tok, live, err := b.Token(ctx, "k"); err != nil || !live || tok != lease.Token+1 {
		t.Fatalf("Token = %d, %v, %v; want %d, live: the grant stays on the primary", tok, live, err, lease.Token+1)
	}
	// A resend with the same lease ID waits again: the same error, no new
	// token.
	_, err = b.Grant(ctx, req)
	wantReplicationError(t, "resent Grant with the replica down", err)
	// Renew likewise waits, and fails.
	_, err = b.Renew(ctx, req)
	wantReplicationError(t, "Renew with the replica down", err)
	if tok, _, _ := b.Token(ctx, "k"); tok != lease.Token+1 {
		t.Fatalf("Token = %d after resends, want %d", tok, lease.Token+1)
	}

	// Through a Coordinator, which resends unknown outcomes with the same
	// lease ID: still an error, never success, and one token used.
	coord := fencing.New(b, fencing.WithOutcomeRetries(2))
	_, err = coord.Grant(ctx, "k2", time.Minute)
	wantReplicationError(t, "Coordinator.Grant with the replica down", err)
	if tok, live, err := b.Token(ctx, "k2"); err != nil || !live || tok != 1 {
		t.Fatalf("Token(k2) = %d, %v, %v; want 1, live", tok, live, err)
	}
}

func wantReplicationError(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded; want an error wrapping ErrReplication and ErrOutcomeUnknown", what)
	}
	if !errors.Is(err, redisbackend.ErrReplication) || !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("%s: %v; want an error wrapping ErrReplication and ErrOutcomeUnknown", what, err)
	}
}
