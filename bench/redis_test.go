package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/fencing-go/fencing"
)

// TestLocksExclude checks that every benchmarked lock does the work it is
// timed for: a second holder is refused while the first holds the key, and
// admitted after the first releases it.
func TestLocksExclude(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("fencing", func(t *testing.T) {
		coord := newCoordinator(t, c, "test:fencing:")
		first, err := coord.Grant(ctx, "k", leaseTTL)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := coord.Grant(ctx, "k", leaseTTL); !errors.Is(err, fencing.ErrLeaseHeld) {
			t.Fatalf("second Grant = %v, want ErrLeaseHeld", err)
		}
		if err := coord.Release(ctx, "k", first.ID); err != nil {
			t.Fatal(err)
		}
		second, err := coord.Grant(ctx, "k", leaseTTL)
		if err != nil {
			t.Fatal(err)
		}
		if second.Token <= first.Token {
			t.Fatalf("token %d after %d", second.Token, first.Token)
		}
		if ok, err := coord.CheckToken(ctx, "k", first.Token); err != nil || ok {
			t.Fatalf("CheckToken(old) = %v, %v; want false", ok, err)
		}
	})

	t.Run("redislock", func(t *testing.T) {
		locker := redislock.New(c)
		first, err := locker.Obtain(ctx, "test:redislock:k", leaseTTL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := locker.Obtain(ctx, "test:redislock:k", leaseTTL, nil); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("second Obtain = %v, want ErrNotObtained", err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		second, err := locker.Obtain(ctx, "test:redislock:k", leaseTTL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := second.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("redsync", func(t *testing.T) {
		rs := redsync.New(redsyncgoredis.NewPool(c))
		opts := []redsync.Option{redsync.WithExpiry(leaseTTL), redsync.WithTries(1)}
		first := rs.NewMutex("test:redsync:k", opts...)
		if err := first.LockContext(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rs.NewMutex("test:redsync:k", opts...).LockContext(ctx); err == nil {
			t.Fatal("second Lock succeeded while the first holds the mutex")
		}
		if ok, err := first.UnlockContext(ctx); err != nil || !ok {
			t.Fatalf("Unlock = %v, %v", ok, err)
		}
		second := rs.NewMutex("test:redsync:k", opts...)
		if err := second.LockContext(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := second.UnlockContext(ctx); err != nil || !ok {
			t.Fatalf("Unlock = %v, %v", ok, err)
		}
	})
}
