package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// Tests of what the Coordinator alone does in Resume: its options and its
// checks before any request. What every backend does with a resumed lease
// is conformance's ResumeAfterRestart.

// TestResumeKeepsSavedMargin: a resumed lease is renewed with its saved TTL
// and Margin, not the Coordinator's default margin, unless WithMargin says
// otherwise.
func TestResumeKeepsSavedMargin(t *testing.T) {
	ctx := context.Background()
	b := memorybackend.New()
	defer b.Close()
	first := fencing.New(b)
	l, err := first.Grant(ctx, "k", time.Minute, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := fencing.New(b, fencing.WithDefaultMargin(7*time.Second))
	saved := fencing.Lease{Key: l.Key, ID: l.ID, Token: l.Token, TTL: l.TTL, Margin: l.Margin}
	h, err := c.Resume(ctx, saved)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if got := h.Lease(); got.TTL != time.Minute || got.Margin != 3*time.Second || got.Token != l.Token {
		t.Fatalf("resumed lease = TTL %v, margin %v, token %d; want 1m0s, 3s, %d", got.TTL, got.Margin, got.Token, l.Token)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}

	l, err = first.Grant(ctx, "k", time.Minute, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	saved = fencing.Lease{Key: l.Key, ID: l.ID, Token: l.Token, TTL: l.TTL, Margin: l.Margin}
	h, err = c.Resume(ctx, saved, fencing.WithMargin(2*time.Second))
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	defer h.Release(ctx)
	if got := h.Lease().Margin; got != 2*time.Second {
		t.Fatalf("resumed lease with WithMargin(2s) has margin %v", got)
	}
}

// TestResumeRefusesBeforeAnyRequest: the options a renewal cannot honour
// (the owner and the lock delay are the grant's) and a Lease saved without
// its token are refused before any request, and leave the lease as it was.
func TestResumeRefusesBeforeAnyRequest(t *testing.T) {
	ctx := context.Background()
	b := &faulty{Backend: memorybackend.New()}
	defer b.Close()
	c := fencing.New(b)
	l, err := c.Grant(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	saved := fencing.Lease{Key: l.Key, ID: l.ID, Token: l.Token, TTL: l.TTL, Margin: l.Margin}
	noToken := saved
	noToken.Token = 0
	for _, tc := range []struct {
		name  string
		lease fencing.Lease
		opts  []fencing.HoldOption
		want  error
	}{
		{"WithOwner", saved, []fencing.HoldOption{fencing.WithOwner("me")}, fencing.ErrInvalidOption},
		{"WithLockDelay", saved, []fencing.HoldOption{fencing.WithLockDelay(time.Second)}, fencing.ErrInvalidOption},
		{"nil option", saved, []fencing.HoldOption{nil}, fencing.ErrInvalidOption},
		{"no token", noToken, nil, fencing.ErrLeaseNotFound},
	} {
		h, err := c.Resume(ctx, tc.lease, tc.opts...)
		if !errors.Is(err, tc.want) || h != nil {
			t.Errorf("%s: Resume = held %v, error %v; want no Held and an error wrapping %v", tc.name, h != nil, err, tc.want)
		}
	}
	if n := len(b.renewSent); n != 0 {
		t.Errorf("%d renewals sent by refused Resumes; want none", n)
	}
	if tok, live, err := c.Token(ctx, "k"); err != nil || !live || tok != l.Token {
		t.Errorf("Token after refused Resumes = %d, %v, %v; want %d, live", tok, live, err, l.Token)
	}

	bad := fencing.New(b, fencing.WithDefaultMargin(-time.Second))
	if _, err := bad.Resume(ctx, saved); !errors.Is(err, fencing.ErrInvalidOption) {
		t.Errorf("Resume on a Coordinator with a refused option: %v, want ErrInvalidOption", err)
	}
}
