package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// OpKind names the backend call an Op records.
type OpKind uint8

// The calls a Recorder records. Guard writes (package guard) are to join
// them as further kinds.
const (
	OpGrant OpKind = iota + 1
	OpRenew
	OpRelease
	OpToken
	OpForceRelease
	OpGrantMany
)

func (k OpKind) String() string {
	switch k {
	case OpGrant:
		return "grant"
	case OpRenew:
		return "renew"
	case OpRelease:
		return "release"
	case OpToken:
		return "token"
	case OpForceRelease:
		return "force-release"
	case OpGrantMany:
		return "grant-many"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one recorded backend call: who made it, what it asked, what came
// back, and when, on two clocks. A history is a []Op in any order.
type Op struct {
	// Client numbers the wrapped backend the call went through (see
	// Recorder.Wrap); the visualization draws one row per client.
	Client int
	Kind   OpKind
	Key    string
	// LeaseID, Timeout and Margin are the request's (Grant, Renew;
	// Release has only LeaseID).
	LeaseID         string
	Timeout, Margin time.Duration
	// Lease is what Grant and Renew returned.
	Lease backend.Lease
	// Requests and Leases are a GrantMany's (Kind OpGrantMany, whose Key
	// and lease fields are empty): what it asked, and what it returned,
	// in the same order.
	Requests []backend.Request
	Leases   []backend.Lease
	// Token and Live are what Token returned; for ForceRelease, Live is
	// whether a live lease was ended.
	Token uint64
	Live  bool
	// Err is the call's error. An error wrapping backend.ErrOutcomeUnknown
	// means the call may or may not have taken effect; any other error
	// that is not a verdict means it did not (as package backend requires).
	Err error
	// Call and Return bracket the call in real time (with monotonic
	// readings): they order the history.
	Call, Return time.Time
	// CoordCall and CoordReturn bracket it on the coordinator's clock as
	// the recorder reads it: the harness's Traits.Now for a fake clock,
	// else the same as Call and Return. Expiry is judged on these.
	CoordCall, CoordReturn time.Time
}

// Recorder records every call made through the backends it wraps, for
// CheckHistory. It is safe for concurrent use.
//
// Record everything that changes the keys you check: a call made around the
// recorder (a ForceRelease on the bare backend, a harness's PresetToken)
// makes the history look wrong.
type Recorder struct {
	now     func() time.Time
	mu      sync.Mutex
	ops     []Op
	clients int
}

// NewRecorder returns a Recorder that reads the coordinator's clock with
// now: Traits.Now when the harness has a fake clock. With now nil it uses
// the local clock, which is the coordinator's clock for a server on this
// machine and an estimate for others (Traits.Slack then covers the drift).
func NewRecorder(now func() time.Time) *Recorder {
	return &Recorder{now: now}
}

// Wrap returns b with every Grant, Renew, Release, Token, ForceRelease and
// GrantMany call recorded, as a client of its own. Give each goroutine of a
// test its own Wrap, so the visualization shows who did what. The result
// implements backend.Notifier, backend.ForceReleaser and
// backend.MultiGranter when b does (notifications change nothing and are
// not recorded); other optional capabilities are not passed through.
func (r *Recorder) Wrap(b backend.Backend) backend.Backend {
	r.mu.Lock()
	client := r.clients
	r.clients++
	r.mu.Unlock()
	rb := &recorded{inner: b, rec: r, client: client}
	var caps int
	n, notifies := b.(backend.Notifier)
	if notifies {
		caps |= 1
	}
	f, forces := b.(backend.ForceReleaser)
	if forces {
		caps |= 2
	}
	m, many := b.(backend.MultiGranter)
	if many {
		caps |= 4
	}
	rn, rf, rm := recordedNotifier{rb, n}, recordedForce{rb, f}, recordedMany{rb, m}
	// One type per set of capabilities, so a type assertion finds exactly
	// b's.
	switch caps {
	case 1:
		return &struct{ recordedNotifier }{rn}
	case 2:
		return &struct{ recordedForce }{rf}
	case 3:
		return &struct {
			*recorded
			recordedNotifier
			recordedForce
		}{rb, rn, rf}
	case 4:
		return &struct{ recordedMany }{rm}
	case 5:
		return &struct {
			*recorded
			recordedNotifier
			recordedMany
		}{rb, rn, rm}
	case 6:
		return &struct {
			*recorded
			recordedForce
			recordedMany
		}{rb, rf, rm}
	case 7:
		return &struct {
			*recorded
			recordedNotifier
			recordedForce
			recordedMany
		}{rb, rn, rf, rm}
	}
	return rb
}

// History returns a copy of the calls recorded so far that have returned.
func (r *Recorder) History() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

func (r *Recorder) coordNow(real time.Time) time.Time {
	if r.now == nil {
		return real
	}
	return r.now()
}

// begin stamps a call's start on both clocks: the coordinator's reading is
// taken after the real one, and at the end before it, so that each pair
// brackets the call.
func (r *Recorder) begin(op *Op) {
	op.Call = time.Now()
	op.CoordCall = r.coordNow(op.Call)
}

func (r *Recorder) end(op *Op) {
	real := time.Now()
	op.CoordReturn = r.coordNow(real)
	op.Return = real
	r.mu.Lock()
	r.ops = append(r.ops, *op)
	r.mu.Unlock()
}

// recorded is a backend.Backend whose calls a Recorder records.
type recorded struct {
	inner  backend.Backend
	rec    *Recorder
	client int
}

func (b *recorded) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	op := Op{Client: b.client, Kind: OpGrant, Key: req.Key, LeaseID: req.LeaseID, Timeout: req.Timeout, Margin: req.Margin}
	b.rec.begin(&op)
	op.Lease, op.Err = b.inner.Grant(ctx, req)
	b.rec.end(&op)
	return op.Lease, op.Err
}

func (b *recorded) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	op := Op{Client: b.client, Kind: OpRenew, Key: req.Key, LeaseID: req.LeaseID, Timeout: req.Timeout, Margin: req.Margin}
	b.rec.begin(&op)
	op.Lease, op.Err = b.inner.Renew(ctx, req)
	b.rec.end(&op)
	return op.Lease, op.Err
}

func (b *recorded) Release(ctx context.Context, key, leaseID string) error {
	op := Op{Client: b.client, Kind: OpRelease, Key: key, LeaseID: leaseID}
	b.rec.begin(&op)
	op.Err = b.inner.Release(ctx, key, leaseID)
	b.rec.end(&op)
	return op.Err
}

func (b *recorded) Token(ctx context.Context, key string) (uint64, bool, error) {
	op := Op{Client: b.client, Kind: OpToken, Key: key}
	b.rec.begin(&op)
	op.Token, op.Live, op.Err = b.inner.Token(ctx, key)
	b.rec.end(&op)
	return op.Token, op.Live, op.Err
}

func (b *recorded) Close() error { return b.inner.Close() }

type recordedNotifier struct {
	*recorded
	n backend.Notifier
}

func (b recordedNotifier) NotifyFree(ctx context.Context, key string) (backend.Subscription, error) {
	return b.n.NotifyFree(ctx, key)
}

type recordedForce struct {
	*recorded
	f backend.ForceReleaser
}

func (b recordedForce) ForceRelease(ctx context.Context, key string) (bool, error) {
	op := Op{Client: b.client, Kind: OpForceRelease, Key: key}
	b.rec.begin(&op)
	op.Live, op.Err = b.f.ForceRelease(ctx, key)
	b.rec.end(&op)
	return op.Live, op.Err
}

type recordedMany struct {
	*recorded
	m backend.MultiGranter
}

func (b recordedMany) GrantMany(ctx context.Context, reqs []backend.Request) ([]backend.Lease, error) {
	op := Op{Client: b.client, Kind: OpGrantMany, Requests: slices.Clone(reqs)}
	b.rec.begin(&op)
	op.Leases, op.Err = b.m.GrantMany(ctx, reqs)
	op.Leases = slices.Clone(op.Leases)
	b.rec.end(&op)
	return op.Leases, op.Err
}
