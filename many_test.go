package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

// A backend without backend.MultiGranter gets errors.ErrUnsupported, and
// no key is taken: there is no fallback to one grant per key.
func TestManyUnsupported(t *testing.T) {
	b := memorybackend.New()
	c := fencing.New(&faulty{Backend: b}) // hides the capabilities
	ctx := context.Background()
	keys := []string{"u/a", "u/b"}
	if _, err := c.GrantMany(ctx, keys, time.Minute); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("GrantMany: %v, want errors.ErrUnsupported", err)
	}
	if _, err := c.HoldMany(ctx, keys, time.Minute); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("HoldMany: %v, want errors.ErrUnsupported", err)
	}
	for _, k := range keys {
		if _, live, _ := fencing.New(b).Token(ctx, k); live {
			t.Fatalf("key %q taken by an unsupported GrantMany", k)
		}
	}
}

// A refused GrantMany names the refusing key once.
func TestGrantManyNamesKey(t *testing.T) {
	c := fencing.New(memorybackend.New())
	ctx := context.Background()
	if _, err := c.Grant(ctx, "n/b", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := c.GrantMany(ctx, []string{"n/a", "n/b"}, time.Minute)
	if !errors.Is(err, fencing.ErrLeaseHeld) || !strings.HasPrefix(err.Error(), `grant "n/b": `) {
		t.Fatalf("GrantMany with n/b held: %v, want ErrLeaseHeld naming \"n/b\"", err)
	}
	_, err = c.GrantMany(ctx, []string{"n/a", "n/c", "n/a"}, time.Minute)
	if !errors.Is(err, fencing.ErrInvalidKey) || !strings.HasPrefix(err.Error(), `grant "n/a": `) {
		t.Fatalf("GrantMany with a key twice: %v, want ErrInvalidKey naming \"n/a\"", err)
	}
	_, err = c.GrantMany(ctx, nil, time.Minute)
	if !errors.Is(err, fencing.ErrInvalidKey) {
		t.Fatalf("GrantMany with no keys: %v, want ErrInvalidKey", err)
	}
}
