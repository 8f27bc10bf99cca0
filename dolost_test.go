package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
)

// When the lease is lost while fn runs, Do says so even when fn returns
// ctx.Err(), the idiomatic thing to return, and keeps fn's error too.
func TestDoReportsLossWhenFnReturnsCtxErr(t *testing.T) {
	env := newEnv(t)
	err := env.c.Do(context.Background(), "k", time.Second, func(ctx context.Context, lease fencing.Lease) error {
		if _, err := env.c.ForceRelease(context.Background(), "k"); err != nil {
			t.Errorf("ForceRelease: %v", err)
		}
		<-ctx.Done() // the next renewal is rejected
		return ctx.Err()
	}, fencing.WithRenewInterval(20*time.Millisecond))
	if !errors.Is(err, fencing.ErrLeaseLost) || !errors.Is(err, fencing.ErrLeaseNotFound) {
		t.Fatalf("Do when fn returned ctx.Err() after a forced release: %v, want ErrLeaseLost", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v, want fn's error (context.Canceled) kept", err)
	}
}

// A fn error with the lease intact is returned as it is.
func TestDoReturnsFnErrorWithoutLoss(t *testing.T) {
	env := newEnv(t)
	mine := errors.New("mine")
	err := env.c.Do(context.Background(), "k", time.Second, func(context.Context, fencing.Lease) error { return mine })
	if err != mine {
		t.Fatalf("Do: %v, want fn's error itself", err)
	}
}
