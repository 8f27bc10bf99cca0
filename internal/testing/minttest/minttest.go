// Package minttest holds every store guard to the rules of guard.MintCheck
// and LowerFence: a token the lock store never minted is refused and changes
// nothing, the lock store is read once per new token and never for a token
// already seen, a store that cannot be read refuses the token, and a
// poisoned fence is lowered by compare-and-set only.
package minttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// Store is a store guard as the suite sees it. Admit goes through the
// guard built with the MintCheck that NewStore was given.
type Store interface {
	Admit(ctx context.Context, resource string, token uint64) error
	Fence(ctx context.Context, resource string) (uint64, error)
	LowerFence(ctx context.Context, resource string, from, to uint64) error
}

// NewStore returns a store guard built with WithMintCheck(mc), on a real
// server. Stores may share their fences: the suite names its resources
// afresh on each run.
type NewStore func(t *testing.T, mc *guard.MintCheck) Store

// Inspector is the lock store the suite's MintCheck reads: a memory
// backend whose reads it counts, that it can make fail, and whose highest
// minted token it can make report more than was minted (a lock store
// restored from an old backup, or one that a forged token fooled before
// the check was on: the way a fence gets poisoned).
type Inspector struct {
	*memorybackend.Backend
	reads atomic.Int64
	mu    sync.Mutex
	fail  error
	max   uint64 // reported MaxToken when above the real one
}

// Inspect counts the read, then fails or reports the key's state.
func (i *Inspector) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	i.reads.Add(1)
	i.mu.Lock()
	fail, max := i.fail, i.max
	i.mu.Unlock()
	if fail != nil {
		return backend.KeyState{}, fail
	}
	st, err := i.Backend.Inspect(ctx, key)
	if err == nil && max > st.MaxToken {
		st.MaxToken = max
	}
	return st, err
}

// Reads returns how many times the lock store was read.
func (i *Inspector) Reads() int64 { return i.reads.Load() }

func (i *Inspector) set(fail error, max uint64) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.fail, i.max = fail, max
}

// mint grants and releases a lease on key, returning its token.
func (i *Inspector) mint(t *testing.T, key string) uint64 {
	t.Helper()
	ctx := context.Background()
	id := name("lease")
	l, err := i.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := i.Release(ctx, key, id); err != nil {
		t.Fatal(err)
	}
	return l.Token
}

func name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "/" + hex.EncodeToString(b)
}

// forged is the token of the forged header that poisoned a fence: the
// largest a SQL integer holds, so every store guard takes it.
const forged = 1<<63 - 1

// Run runs the suite against the store guards newStore makes.
func Run(t *testing.T, newStore NewStore) {
	setup := func(t *testing.T) (*Inspector, Store, string) {
		insp := &Inspector{Backend: memorybackend.New()}
		t.Cleanup(func() { insp.Close() })
		return insp, newStore(t, guard.NewMintCheck(insp)), name("mint")
	}
	ctx := context.Background()
	fence := func(t *testing.T, s Store, resource string) uint64 {
		t.Helper()
		f, err := s.Fence(ctx, resource)
		if err != nil {
			t.Fatalf("Fence: %v", err)
		}
		return f
	}

	t.Run("ForgedRefused", func(t *testing.T) {
		insp, s, res := setup(t)
		tok := insp.mint(t, res)
		if err := s.Admit(ctx, res, tok); err != nil {
			t.Fatalf("minted token %d: %v", tok, err)
		}
		err := s.Admit(ctx, res, forged)
		var nm *guard.NotMintedError
		if !errors.Is(err, guard.ErrNotMinted) || !errors.As(err, &nm) || nm.Token != forged || nm.Max != tok || nm.Resource != res {
			t.Fatalf("forged token: %v (%+v), want a *NotMintedError with max %d", err, nm, tok)
		}
		if f := fence(t, s, res); f != tok {
			t.Fatalf("fence after a refused forged token: %d, want %d", f, tok)
		}
		// Refused, it is not remembered as minted: its second try reads
		// the lock store again and is refused again.
		before := insp.Reads()
		if err := s.Admit(ctx, res, forged); !errors.As(err, &nm) || nm.Token != forged || nm.Max != tok {
			t.Fatalf("forged token, second try: %v, want a *NotMintedError with max %d", err, tok)
		}
		if n := insp.Reads() - before; n != 1 {
			t.Fatalf("the forged token's second try read the lock store %d times, want 1", n)
		}
		if f := fence(t, s, res); f != tok {
			t.Fatalf("fence after the forged token's second try: %d, want %d", f, tok)
		}
		next := insp.mint(t, res)
		if err := s.Admit(ctx, res, next); err != nil {
			t.Fatalf("the next holder's token %d after a forged one: %v", next, err)
		}
		// A key the lock store never granted: every token is forged.
		never := name("never")
		if err := s.Admit(ctx, never, 1); !errors.As(err, &nm) || nm.Max != 0 {
			t.Fatalf("token for a key never granted: %v, want a *NotMintedError with max 0", err)
		}
		if f := fence(t, s, never); f != 0 {
			t.Fatalf("fence of a key never granted after a refusal: %d, want 0", f)
		}
	})

	t.Run("OneReadPerTakeover", func(t *testing.T) {
		insp, s, res := setup(t)
		first := insp.mint(t, res)
		second := insp.mint(t, res)
		before := insp.Reads()
		if err := s.Admit(ctx, res, second); err != nil {
			t.Fatal(err)
		}
		if n := insp.Reads() - before; n != 1 {
			t.Fatalf("a new holder's first admit read the lock store %d times, want 1", n)
		}
		for range 5 {
			if err := s.Admit(ctx, res, second); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Admit(ctx, res, first); !errors.Is(err, guard.ErrStaleToken) {
			t.Fatalf("the earlier holder's token: %v, want ErrStaleToken", err)
		}
		if n := insp.Reads() - before; n != 1 {
			t.Fatalf("later admits of a token already seen minted read the lock store: %d reads in all, want 1", n)
		}
	})

	t.Run("StoreUnreadable", func(t *testing.T) {
		insp, s, res := setup(t)
		tok := insp.mint(t, res)
		down := errors.New("lock store down")
		insp.set(down, 0)
		err := s.Admit(ctx, res, tok)
		if !errors.Is(err, guard.ErrMintUnchecked) || !errors.Is(err, down) || errors.Is(err, guard.ErrNotMinted) {
			t.Fatalf("admit with the lock store down: %v, want ErrMintUnchecked wrapping its error", err)
		}
		if f := fence(t, s, res); f != 0 {
			t.Fatalf("fence after an unchecked token: %d, want 0", f)
		}
		insp.set(nil, 0)
		if err := s.Admit(ctx, res, tok); err != nil {
			t.Fatalf("admit with the lock store back: %v", err)
		}
		// A token seen minted needs no read: the store may be down.
		insp.set(down, 0)
		if err := s.Admit(ctx, res, tok); err != nil {
			t.Fatalf("admit of a token seen minted, lock store down: %v", err)
		}
	})

	t.Run("LowerPoisonedFence", func(t *testing.T) {
		insp, s, res := setup(t)
		insp.set(nil, forged) // the lock store is fooled once
		if err := s.Admit(ctx, res, forged); err != nil {
			t.Fatalf("poisoning: %v", err)
		}
		insp.set(nil, 0)
		tok := insp.mint(t, res)
		if err := s.Admit(ctx, res, tok); !errors.Is(err, guard.ErrStaleToken) {
			t.Fatalf("a real holder under a poisoned fence: %v, want ErrStaleToken", err)
		}
		// Compare-and-set: a fence that is not from stays, whether it is
		// to be lowered or removed.
		for _, to := range []uint64{tok, 0} {
			err := s.LowerFence(ctx, res, forged-1, to)
			var fc *guard.FenceChangedError
			if !errors.Is(err, guard.ErrFenceChanged) || !errors.As(err, &fc) || fc.Fence != forged || fc.From != forged-1 {
				t.Fatalf("LowerFence from the wrong fence to %d: %v (%+v), want a *FenceChangedError naming %d", to, err, fc, forged)
			}
		}
		if err := s.LowerFence(ctx, res, forged, forged); !errors.Is(err, guard.ErrInvalidToken) {
			t.Fatalf("LowerFence to the same fence: %v, want ErrInvalidToken", err)
		}
		if err := s.LowerFence(ctx, name("none"), 3, 0); !errors.Is(err, guard.ErrFenceChanged) {
			t.Fatalf("LowerFence of a resource with no fence: %v, want ErrFenceChanged", err)
		}
		if f := fence(t, s, res); f != forged {
			t.Fatalf("fence after refused lowerings: %d, want %d", f, forged)
		}
		if err := s.LowerFence(ctx, res, forged, tok-1); err != nil {
			t.Fatalf("LowerFence: %v", err)
		}
		if f := fence(t, s, res); f != tok-1 {
			t.Fatalf("fence after LowerFence: %d, want %d", f, tok-1)
		}
		if err := s.Admit(ctx, res, tok); err != nil {
			t.Fatalf("the real holder after the fence was lowered: %v", err)
		}
		// Clear it: the fence is gone, a lower token is admitted again.
		if err := s.LowerFence(ctx, res, tok, 0); err != nil {
			t.Fatalf("LowerFence to 0: %v", err)
		}
		if f := fence(t, s, res); f != 0 {
			t.Fatalf("fence after clearing: %d, want 0", f)
		}
	})
}
