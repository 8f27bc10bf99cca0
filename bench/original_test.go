package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// original is the in-memory coordinator as first designed, rebuilt from its
// description: one sync.Mutex over two maps, key
// -> the key's lease (deleted on release) and key -> the highest token ever
// minted; time.Now read under the lock; the lease ID made with fmt.Sprintf
// from the key, the token and the time; argument checks before the lock; no
// sharding.
//
// It is a coordinator of its own, not a backend.Backend under a
// fencing.Coordinator: it made its lease IDs itself, so its ID costs are
// part of its Grant, as ours (newLeaseID and the Coordinator's work) are
// part of fencing.Coordinator.Grant. The report calls each where a user
// calls it.
type original struct {
	mu      sync.Mutex
	leases  map[string]originalLease
	highest map[string]uint64
}

type originalLease struct {
	id        string
	token     uint64
	expiresAt time.Time
}

// OriginalLease is what the original Grant returned.
type OriginalLease struct {
	Key       string
	ID        string
	Token     uint64
	ExpiresAt time.Time
}

func newOriginal() *original {
	return &original{leases: make(map[string]originalLease), highest: make(map[string]uint64)}
}

func checkOriginalKey(key string) error {
	if key == "" || len(key) > backend.MaxKeyLength {
		return fencing.ErrInvalidKey
	}
	return nil
}

// Grant takes a lease on key for ttl, or fails with ErrLeaseHeld.
func (o *original) Grant(ctx context.Context, key string, ttl time.Duration) (OriginalLease, error) {
	if err := ctx.Err(); err != nil {
		return OriginalLease{}, err
	}
	if err := checkOriginalKey(key); err != nil {
		return OriginalLease{}, err
	}
	if ttl <= 0 {
		return OriginalLease{}, fencing.ErrInvalidTimeout
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if l, ok := o.leases[key]; ok && now.Before(l.expiresAt) {
		return OriginalLease{}, fencing.ErrLeaseHeld
	}
	token := o.highest[key] + 1
	o.highest[key] = token
	id := fmt.Sprintf("%s-%d-%d", key, token, now.UnixNano())
	l := originalLease{id: id, token: token, expiresAt: now.Add(ttl)}
	o.leases[key] = l
	return OriginalLease{Key: key, ID: id, Token: token, ExpiresAt: l.expiresAt}, nil
}

// Release ends the lease id on key.
func (o *original) Release(ctx context.Context, key, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkOriginalKey(key); err != nil {
		return err
	}
	if id == "" {
		return fencing.ErrLeaseNotFound
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	l, ok := o.leases[key]
	if !ok || l.id != id {
		return fencing.ErrLeaseNotFound
	}
	delete(o.leases, key)
	if !now.Before(l.expiresAt) {
		return fencing.ErrLeaseExpired
	}
	return nil
}

// CheckToken reports whether token is the token of key's live lease.
func (o *original) CheckToken(ctx context.Context, key string, token uint64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkOriginalKey(key); err != nil {
		return false, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	l, ok := o.leases[key]
	return ok && l.token == token && now.Before(l.expiresAt), nil
}

// TestOriginal checks that the baseline does the work the report times:
// grants that mint increasing tokens, refusals while held, releases that
// free the key, token checks that see only the live lease.
func TestOriginal(t *testing.T) {
	ctx := context.Background()
	o := newOriginal()
	a, err := o.Grant(ctx, "k", time.Minute)
	if err != nil || a.Token != 1 {
		t.Fatalf("Grant = %+v, %v; want token 1", a, err)
	}
	if _, err := o.Grant(ctx, "k", time.Minute); !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("second Grant: %v, want ErrLeaseHeld", err)
	}
	if ok, err := o.CheckToken(ctx, "k", 1); err != nil || !ok {
		t.Fatalf("CheckToken(1) = %v, %v while held", ok, err)
	}
	if err := o.Release(ctx, "k", a.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if ok, _ := o.CheckToken(ctx, "k", 1); ok {
		t.Fatal("CheckToken(1) true after release")
	}
	if err := o.Release(ctx, "k", a.ID); !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Fatalf("second Release: %v, want ErrLeaseNotFound", err)
	}
	if b, err := o.Grant(ctx, "k", time.Minute); err != nil || b.Token != 2 || b.ID == a.ID {
		t.Fatalf("Grant after release = %+v, %v; want token 2 and a new ID", b, err)
	}
	if _, err := o.Grant(ctx, "", time.Minute); !errors.Is(err, fencing.ErrInvalidKey) {
		t.Fatalf("Grant(\"\"): %v, want ErrInvalidKey", err)
	}
}
