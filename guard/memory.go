package guard

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Memory is a Guard that keeps fences in process memory: for a resource
// that lives in the same process (a map, a file the process alone writes),
// for tests, and as the reference the store guards are held to.
//
// It keeps one small record per resource admitted, until the resource is
// dropped with it (Drop). Fences are lost when the process exits: a resource that
// outlives the process needs a store guard, whose fence is kept with the
// data.
type Memory struct {
	mu        sync.Mutex
	resources map[string]*fence
	metrics   *Metrics
	mint      *MintCheck
}

// MemoryOption configures a Memory.
type MemoryOption func(*Memory)

// WithMeterProvider counts the writes the Memory refuses for a stale token
// on mp (MetricStaleTokens; without this option the global provider, a
// no-op until an OpenTelemetry SDK is installed; a nil mp records nothing).
func WithMeterProvider(mp metric.MeterProvider) MemoryOption {
	return func(m *Memory) { m.metrics = NewMetrics(mp, "memory") }
}

// WithMintCheck makes the Memory refuse a token the lock store never
// minted, with an error wrapping ErrNotMinted (see MintCheck), before it
// takes the resource's lock.
func WithMintCheck(mc *MintCheck) MemoryOption {
	return func(m *Memory) { m.mint = mc }
}

// fence is one resource's high-water mark and the lock that makes its check
// and its write one step.
type fence struct {
	mu    sync.Mutex
	token uint64
	// dropped: Drop took it out of the map; who locks it then looks again.
	dropped bool
}

// NewMemory returns a Memory with no fences.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{resources: make(map[string]*fence)}
	for _, o := range opts {
		o(m)
	}
	if m.metrics == nil {
		m.metrics = NewMetrics(otel.GetMeterProvider(), "memory")
	}
	return m
}

var _ Guard = (*Memory)(nil)

// Admit raises resource's fence to token, or returns an error wrapping
// ErrStaleToken if token is below it. It waits for a Write on the same
// resource that is under way.
func (m *Memory) Admit(ctx context.Context, resource string, token uint64) error {
	return m.Write(ctx, resource, token, nil)
}

// Write runs write as one step with admitting token for resource: it holds
// the resource's lock, refuses a token below the fence with an error
// wrapping ErrStaleToken (write is not called), calls write, and raises the
// fence to token only if write returns nil. An error from write is returned
// as it is, and the fence stays where it was.
//
// write must not call the Memory for the same resource (it would deadlock),
// and on error it must leave the resource as it found it: the guard can keep
// the fence from moving, not undo what write did. A nil write is an Admit.
func (m *Memory) Write(ctx context.Context, resource string, token uint64, write func() error) error {
	return m.step(ctx, resource, token, write, false)
}

// step is Write, and Drop when drop: it admits token and runs fn under the
// resource's lock, then raises the fence (or forgets it) if fn returns nil.
func (m *Memory) step(ctx context.Context, resource string, token uint64, fn func() error, drop bool) error {
	if err := CheckAdmit(resource, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := m.mint.Check(ctx, resource, token); err != nil {
		return err
	}
	f := m.lock(resource)
	defer f.mu.Unlock()
	if token < f.token {
		return m.metrics.Observe(ctx, StaleError(resource, token, f.token))
	}
	if fn != nil {
		if err := fn(); err != nil {
			return err
		}
	}
	if !drop {
		f.token = token
		return nil
	}
	f.token, f.dropped = 0, true
	m.mu.Lock()
	delete(m.resources, resource)
	m.mu.Unlock()
	return nil
}

// Fence returns resource's fence: the highest token admitted for it, or 0
// if none was.
func (m *Memory) Fence(resource string) uint64 {
	m.mu.Lock()
	f, ok := m.resources[resource]
	m.mu.Unlock()
	if !ok {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.token
}

// LowerFence sets resource's fence to to if it is from, and otherwise
// returns a *FenceChangedError (wrapping ErrFenceChanged) and changes
// nothing: the break-glass for a fence raised by a token that should never
// have been admitted. to must be below from; 0 clears the fence. It waits
// for a Write on the resource that is under way.
func (m *Memory) LowerFence(ctx context.Context, resource string, from, to uint64) error {
	if err := CheckLower(resource, from, to); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f := m.lock(resource)
	defer f.mu.Unlock()
	if f.token != from {
		return &FenceChangedError{Resource: resource, From: from, Fence: f.token}
	}
	f.token = to
	return nil
}

// Drop deletes resource with its fence, as one step with admitting token:
// it holds the resource's lock, refuses a token below the fence with an
// error wrapping ErrStaleToken (drop is not called), calls drop, which
// deletes the resource, and forgets the fence only if drop returns nil. An
// error from drop is returned as it is, and the fence stays.
//
// Once the fence is gone, any token is admitted on resource again, an old
// holder's too: drop a fence only with a resource that no late write can
// bring back ("Dropping a fence" in docs/guards.md). drop has Write's
// rules; a nil drop only forgets the fence.
func (m *Memory) Drop(ctx context.Context, resource string, token uint64, drop func() error) error {
	return m.step(ctx, resource, token, drop, true)
}

// lock returns resource's fence, locked: one in the map, never one that a
// Drop has taken out while the caller waited for its lock.
func (m *Memory) lock(resource string) *fence {
	for {
		f := m.fence(resource)
		f.mu.Lock()
		if !f.dropped {
			return f
		}
		f.mu.Unlock()
	}
}

func (m *Memory) fence(resource string) *fence {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.resources[resource]
	if !ok {
		f = &fence{}
		m.resources[resource] = f
	}
	return f
}
