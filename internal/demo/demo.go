// Package demo is the fencing demo: worker A takes a lease, stalls past it,
// worker B takes the key with a larger token and writes, and A's late write
// is rejected by the store's token check. It runs on the in-memory backend
// with a fake clock, so it is instant and needs no server.
//
// It imports only the root package, memorybackend and guard, so that
// "go run ./cmd/fencing-demo" builds from a cold module cache without the
// etcd, gRPC and Redis stacks; the fencing CLI's demo command runs the same
// code.
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
)

// Description says what the demo shows, for a command's help.
const Description = `The demo plays the classic failure of leases without fencing on the in-memory
backend: worker A takes a lease, stalls past it, worker B takes the key with a
larger token and writes, and A's late write is rejected by the store's token
check. It exits with status 0 when the stale write was rejected, 1 when it was
accepted (-fence=false), and 2 for bad flags.`

// ErrUsage marks flags or a Config the demo cannot run with.
var ErrUsage = errors.New("usage error")

// Config is what the demo's flags set.
type Config struct {
	Key     string        // the key both workers lease, and the record they write
	Timeout time.Duration // the lease timeout
	Margin  time.Duration // the coordinator's safety margin past the timeout
	Pause   time.Duration // how long worker A stalls; must exceed Timeout + Margin
	Fence   bool          // the store checks tokens
}

// DefaultConfig returns the demo's defaults.
func DefaultConfig() Config {
	return Config{Key: "orders/42", Timeout: 10 * time.Second, Margin: fencing.DefaultMargin, Pause: 15 * time.Second, Fence: true}
}

// Flags declares the demo's flags on fs and returns the function that runs
// the demo with their values and the remaining arguments (there must be
// none).
func Flags(fs *flag.FlagSet) func(ctx context.Context, w io.Writer, args []string) error {
	cfg := DefaultConfig()
	fs.StringVar(&cfg.Key, "key", cfg.Key, "the `key` both workers lease, and the record they write")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "lease timeout")
	fs.DurationVar(&cfg.Margin, "margin", cfg.Margin, "the coordinator's safety margin past the timeout")
	fs.DurationVar(&cfg.Pause, "pause", cfg.Pause, "how long worker A stalls (a simulated GC pause); must exceed timeout + margin")
	fs.BoolVar(&cfg.Fence, "fence", cfg.Fence, "make the store check tokens; -fence=false shows the failure (and exits 1)")
	return func(ctx context.Context, w io.Writer, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: demo takes no arguments, got %q", ErrUsage, args)
		}
		return Run(ctx, w, cfg)
	}
}

// store stands for the protected resource: a key-value store that, when
// fenced, admits each write through an in-memory guard (guard.Memory),
// which refuses a token lower than the highest it has admitted for the
// record, in one step with the write.
type store struct {
	guard *guard.Memory // nil: the store ignores tokens

	mu     sync.Mutex
	values map[string]string
}

func newStore(fenced bool) *store {
	s := &store{values: make(map[string]string)}
	if fenced {
		s.guard = guard.NewMemory()
	}
	return s
}

// Write stores value under record, through the guard when the store is
// fenced: a token below the record's fence gets guard.ErrStaleToken.
func (s *store) Write(ctx context.Context, record string, token uint64, value string) error {
	set := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.values[record] = value
		return nil
	}
	if s.guard == nil {
		return set()
	}
	return s.guard.Write(ctx, record, token, set)
}

// Read returns the value stored under record.
func (s *store) Read(record string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[record]
}

// timeline prints events stamped with the time elapsed on the demo's
// coordinator clock.
type timeline struct {
	w     io.Writer
	clock *memorybackend.FakeClock
	start time.Time
}

func (t timeline) at(who, format string, args ...any) {
	fmt.Fprintf(t.w, "t=%-5s %-12s %s\n", "+"+t.clock.Now().Sub(t.start).String(), who, fmt.Sprintf(format, args...))
}

// Run plays the classic failure of a lease without fencing on w, on an
// in-memory coordinator whose clock moves by hand, and with a store that
// really compares tokens (unless cfg.Fence is false). It returns nil when
// the store rejected the stale write, an error wrapping ErrUsage when cfg
// cannot show it, and another error otherwise.
func Run(ctx context.Context, w io.Writer, cfg Config) error {
	if cfg.Pause <= cfg.Timeout+cfg.Margin {
		return fmt.Errorf("%w: -pause %v must exceed -timeout %v + -margin %v, or A's lease never runs out", ErrUsage, cfg.Pause, cfg.Timeout, cfg.Margin)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := memorybackend.NewFakeClock(start)
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	coord := fencing.New(mem, fencing.WithDefaultMargin(cfg.Margin))
	fenced := newStore(cfg.Fence)
	tl := timeline{w: w, clock: clock, start: start}
	key := cfg.Key

	fmt.Fprintf(w, `Fencing demo: a worker that stalls past its lease, and the token that stops its write.

The coordinator (the in-memory backend) runs on a fake clock that this demo moves by
hand, so the run is instant and the same every time; t= is time on that clock. A
lease's Deadline is on the holder's real monotonic clock, which a fake clock cannot
move: A's local view below is the one it had when it last checked, as with a real
pause, which a process cannot notice until after it has acted.

`)
	if !cfg.Fence {
		fmt.Fprintf(w, "The store's token check is OFF (-fence=false).\n\n")
	}
	a, err := coord.Grant(ctx, key, cfg.Timeout)
	if err != nil {
		return fmt.Errorf("worker A: %w", err)
	}
	tl.at("A", "grant %q for %v -> token %d (the coordinator keeps it until t=+%v: timeout + %v margin)",
		key, cfg.Timeout, a.Token, a.ExpiresAt.Sub(start), a.Margin)
	tl.at("A", "checks its lease: %v left before its Deadline, so it goes ahead", a.Remaining().Round(time.Second))
	tl.at("A", "prepares the write %q ... and stalls: a %v stop-the-world GC pause", "A's value", cfg.Pause)

	clock.Advance(cfg.Timeout / 2)
	if _, err := coord.Grant(ctx, key, cfg.Timeout); !errors.Is(err, fencing.ErrLeaseHeld) {
		return fmt.Errorf("worker B's early grant: got %v, want ErrLeaseHeld", err)
	}
	tl.at("B", "grant %q -> refused, A's lease is live (ErrLeaseHeld)", key)

	clock.Advance(cfg.Pause - cfg.Timeout/2)
	tl.at("coordinator", "A's lease ran out at t=+%v; A is frozen and cannot know", a.ExpiresAt.Sub(start))
	if ok, err := coord.CheckToken(ctx, key, a.Token); err != nil || ok {
		return fmt.Errorf("token %d checks %v, %v after expiry; want false", a.Token, ok, err)
	}
	b, err := coord.Grant(ctx, key, cfg.Timeout)
	if err != nil {
		return fmt.Errorf("worker B: %w", err)
	}
	tl.at("B", "grant %q for %v -> token %d", key, cfg.Timeout, b.Token)
	if err := fenced.Write(ctx, key, b.Token, "B's value"); err != nil {
		return fmt.Errorf("worker B's write: %w", err)
	}
	tl.at("B", "write %q with token %d -> accepted", "B's value", b.Token)

	tl.at("A", "wakes up and sends the write it prepared, with token %d", a.Token)
	staleErr := fenced.Write(ctx, key, a.Token, "A's value")
	if staleErr == nil {
		tl.at("store", "ACCEPTED: the stale write clobbered B's; value is now %q", fenced.Read(key))
		return fmt.Errorf("the store accepted the stale write with token %d after token %d", a.Token, b.Token)
	}
	tl.at("store", "REJECTED: %v", staleErr)
	// A's lease is no longer the key's most recent one, so the coordinator
	// does not know its ID any more.
	if _, err := coord.Renew(ctx, key, a.ID, cfg.Timeout); !errors.Is(err, fencing.ErrLeaseNotFound) {
		return fmt.Errorf("worker A's renew: got %v, want ErrLeaseNotFound", err)
	}
	tl.at("A", "tries to renew -> ErrLeaseNotFound (B holds the key now), so A stops")
	tl.at("store", "%q = %q (B's write survived)", key, fenced.Read(key))

	// The same two writes, in the same order, on a store that does not check.
	plain := newStore(false)
	if err := plain.Write(ctx, key, b.Token, "B's value"); err != nil {
		return err
	}
	if err := plain.Write(ctx, key, a.Token, "A's value"); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nWithout fencing (the same writes, in the same order, on a store that ignores tokens):\n")
	fmt.Fprintf(w, "  B writes with token %d, then A writes with token %d: both accepted, %q = %q.\n", b.Token, a.Token, key, plain.Read(key))
	fmt.Fprintf(w, "  B's update is lost, and neither worker saw an error.\n")
	fmt.Fprintf(w, "\nResult: the stale write with token %d was rejected because the store had seen token %d.\n", a.Token, b.Token)
	return nil
}
