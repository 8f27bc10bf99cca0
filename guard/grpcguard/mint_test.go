package grpcguard_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/grpcguard"
	"github.com/fencing-go/fencing/memorybackend"
)

// Under WithMintCheck a token the lock store never minted is refused with
// PermissionDenied before the handler runs, one that cannot be checked with
// Unavailable; a minted one reaches the handler. A handler's own guard
// error of either kind gets the same codes from Status.
func TestWithMintCheck(t *testing.T) {
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	coord := fencing.New(b)
	ctx := context.Background()
	l, err := coord.Grant(ctx, "orders/42", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(false)
	conn := serve(t, s, grpcguard.WithMintCheck(guard.NewMintCheck(coord)))
	for name, call := range map[string]func(context.Context) error{
		"unary":  func(ctx context.Context) error { return set(ctx, conn, "v") },
		"stream": func(ctx context.Context) error { return sets(ctx, conn, "v") },
	} {
		if err := call(tokenCtx("orders/42", l.Token)); err != nil {
			t.Fatalf("%s, minted token: %v", name, err)
		}
		s.mu.Lock()
		calls := s.calls
		s.mu.Unlock()
		err := call(tokenCtx("orders/42", 1<<63-1))
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s, forged token: %v, want PermissionDenied", name, err)
		}
		s.mu.Lock()
		if s.calls != calls {
			t.Fatalf("%s: the handler ran for a forged token", name)
		}
		s.mu.Unlock()
	}
	b.Close()
	if err := set(tokenCtx("orders/42", l.Token+1), conn, "v"); status.Code(err) != codes.Unavailable {
		t.Fatalf("lock store closed: %v, want Unavailable", err)
	}
	if err := set(tokenCtx("orders/42", l.Token), conn, "v"); err != nil {
		t.Fatalf("a token seen minted, lock store closed: %v", err)
	}
	for err, code := range map[error]codes.Code{
		&guard.NotMintedError{Resource: "r", Token: 9, Max: 1}: codes.PermissionDenied,
		guard.ErrMintUnchecked:                                 codes.Unavailable,
	} {
		if got := status.Code(grpcguard.Status(err)); got != code {
			t.Errorf("Status(%v): %v, want %v", err, got, code)
		}
	}
}
