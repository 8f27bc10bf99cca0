package election_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/election"
	"github.com/fencing-go/fencing/internal/testing/faultbackend"
	"github.com/fencing-go/fencing/memorybackend"
)

// TestCampaignWonAsContextEnds: a Campaign whose grant succeeds at the
// moment its context ends returns the context's error and releases the
// term it won, so that the office is vacant and another candidate leads at
// once (no goroutine is left renewing: goleak checks at the end).
func TestCampaignWonAsContextEnds(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var won bool
	fb := faultbackend.New(mem, func(_ context.Context, op faultbackend.Op, _ string, err error) error {
		if op == faultbackend.Grant && err == nil && !won {
			won = true
			cancel() // the answer arrives as Campaign's context ends
		}
		return err
	})
	e := election.New(fencing.New(fb), "office", time.Minute)
	h, err := e.Campaign(ctx, "late")
	if !won || !errors.Is(err, context.Canceled) {
		if h != nil {
			h.Release(context.Background())
		}
		t.Fatalf("Campaign whose grant succeeded as its context ended: %v (granted: %v), want context.Canceled", err, won)
	}
	l, err := e.Leader(context.Background())
	if err != nil || l.Live {
		t.Fatalf("Leader after the canceled Campaign = %+v, %v; want a vacancy (the term won was kept)", l, err)
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer tcancel()
	next, err := e.Campaign(tctx, "next")
	if err != nil {
		t.Fatalf("the next candidate: %v", err)
	}
	next.Release(context.Background())
}

// TestCampaignUnsettledAsContextEnds: a Campaign whose context ends while
// its grant's outcome is unknown, and whose release of that grant fails
// too, returns the context's error and Lock's *fencing.OutcomeError, whose
// lease ID is left for the caller to settle.
func TestCampaignUnsettledAsContextEnds(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	unknown := fmt.Errorf("test: reply lost: %w", backend.ErrOutcomeUnknown)
	fb := faultbackend.New(mem, func(_ context.Context, op faultbackend.Op, _ string, err error) error {
		switch op {
		case faultbackend.Grant:
			cancel() // the grant's reply is lost as Campaign's context ends
			return unknown
		case faultbackend.Release:
			return unknown
		}
		return err
	})
	e := election.New(fencing.New(fb), "office", time.Minute)
	h, err := e.Campaign(ctx, "late")
	if h != nil {
		h.Release(context.Background())
	}
	var oe *fencing.OutcomeError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &oe) || oe.Settled {
		t.Fatalf("Campaign whose grant and release had unknown outcomes as its context ended: %v, want context.Canceled and an unsettled *fencing.OutcomeError", err)
	}
	if err := fencing.New(mem).Release(context.Background(), oe.Key, oe.LeaseID); err != nil {
		t.Fatalf("settling the OutcomeError's lease: %v", err)
	}
}

// TestRunReturnsAfterLeadReturnsNil: lead returning nil while it still
// leads ends Run with nil, after resigning; Run does not campaign again. A
// second call of lead fails the test at once (it would otherwise lead
// forever, until the package's timeout).
func TestRunReturnsAfterLeadReturnsNil(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	e := election.New(fencing.New(mem), "office", time.Minute)
	calls := 0
	errAgain := errors.New("lead called again")
	err := e.Run(context.Background(), "me", func(context.Context, fencing.Lease) error {
		if calls++; calls > 1 {
			return errAgain
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Run after lead returned nil = %v (lead called %d times), want nil at once", err, calls)
	}
	if l, err := e.Leader(context.Background()); err != nil || l.Live {
		t.Fatalf("Leader after Run = %+v, %v; want a vacancy", l, err)
	}
}
