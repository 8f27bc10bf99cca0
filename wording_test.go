package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Errors name the package at most once, so a program that prints them
// after its own "fencing: " shows it once; and a refused grant does not
// claim the key's lease is another holder's, which the backend cannot know
// (it may be the caller's own, lost).
func TestErrorWording(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.grant(t, "jobs/b", time.Minute)
	_, err := env.c.Grant(ctx, "jobs/b", time.Minute)
	if !errors.Is(err, fencing.ErrLeaseHeld) {
		t.Fatalf("Grant of a held key: %v", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, `grant "jobs/b": key held by a live lease (for `) || strings.Contains(msg, "another") {
		t.Errorf("refused grant: %q, want `grant \"jobs/b\": key held by a live lease (for ...)`", msg)
	}

	h, err := env.c.Hold(ctx, "jobs/c", time.Second, fencing.WithRenewInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.ForceRelease(ctx, "jobs/c"); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	errs := []error{err, h.Err(), h.Release(ctx)}
	_, err = env.c.Renew(ctx, "jobs/c", h.Lease().ID, time.Second)
	errs = append(errs, err)
	_, err = env.c.Grant(ctx, "k", 0)
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			continue
		}
		if printed := "fencing: " + err.Error(); strings.Count(printed, "fencing") != 1 {
			t.Errorf("printed as a program would: %q, want the package named once", printed)
		}
	}
}

// A timeout below backend.MinTimeout is refused, not granted with a
// Deadline that has passed already.
func TestTimeoutBelowMinimumRefused(t *testing.T) {
	env := newEnv(t)
	for _, d := range []time.Duration{time.Nanosecond, backend.MinTimeout - 1} {
		l, err := env.c.Grant(context.Background(), "k", d)
		if !errors.Is(err, fencing.ErrInvalidTimeout) {
			t.Fatalf("Grant for %v: %+v, %v; want ErrInvalidTimeout", d, l, err)
		}
	}
	if _, err := env.c.Grant(context.Background(), "k", backend.MinTimeout); err != nil {
		t.Fatalf("Grant for MinTimeout: %v", err)
	}
}
