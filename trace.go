package fencing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Traces. With WithTracerProvider, a Coordinator records OpenTelemetry
// spans (scope guard.MeterName, as its metrics):
//
//   - SpanGrant, SpanRenew and SpanRelease for each grant (Grant, Hold),
//     renewal (Renew, a held lease's background renewals) and release,
//     from its first attempt to its last, with each resend as an event;
//   - SpanLockWait for Lock's whole wait, each grant attempt an event;
//   - SpanHeld for a held lease (Hold, Lock), from its grant to its
//     release or loss; its renewals are its children, and its context
//     (Held.Context) carries it, so the work done under the lease is too.
//
// Their attributes are the backend, the key (see below), the lease's owner
// (WithOwner, WithDefaultOwner: a public label), its token and the
// outcome, never the lease ID. A key is not written as it is, since keys
// may name customers or files: spans carry AttrKeyHash, the first 64 bits
// of its SHA-256 in hex, the same for one key in every process and span,
// unless WithKeyLabel names it otherwise. The hash is a correlation handle,
// not a secret: a key from a small set can be found by hashing the set.
const (
	SpanGrant    = "fencing.grant"
	SpanRenew    = "fencing.renew"
	SpanRelease  = "fencing.release"
	SpanLockWait = "fencing.lock.wait"
	SpanHeld     = "fencing.held"
)

// Span attribute keys, besides AttrBackend, AttrOutcome, AttrReason and
// AttrFIFO.
const (
	// AttrKeyHash is a span's key as a hash (see SpanGrant).
	AttrKeyHash = attribute.Key("fencing.key.hash")
	// AttrKey is a span's key as WithKeyLabel named it.
	AttrKey = attribute.Key("fencing.key")
	// AttrOwner is the lease's public owner label.
	AttrOwner = attribute.Key("fencing.owner")
	// AttrToken is the lease's fencing token.
	AttrToken = attribute.Key("fencing.token")
)

// WithTracerProvider makes the Coordinator record spans on tp (see
// SpanGrant). Without it, or with a nil tp, it records none, and a request
// costs one nil check for it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithKeyLabel makes spans name a key as label(key), in attribute AttrKey,
// instead of its hash (AttrKeyHash): the way to see keys in traces. To see
// them as they are, pass func(k string) string { return k }; to see their
// kind only, map them to a few labels ("orders/*"). label is called once
// per span, and must be safe for concurrent use. Metrics never carry a key.
func WithKeyLabel(label func(key string) string) Option {
	return func(c *config) { c.keyLabel = label }
}

// keyAttr is the attribute that names key in a span.
func (o *observer) keyAttr(key string) attribute.KeyValue {
	if o.keyLabel != nil {
		return AttrKey.String(o.keyLabel(key))
	}
	sum := sha256.Sum256([]byte(key))
	return AttrKeyHash.String(hex.EncodeToString(sum[:8]))
}

// tspan is a span being recorded, or nothing when tracing is off: every
// method is then a nil check.
type tspan struct{ s trace.Span }

// startSpan starts span name about key when tracing is on, and returns
// ctx carrying it.
func (o *observer) startSpan(ctx context.Context, name, key string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, tspan) {
	if o.tracer == nil {
		return ctx, tspan{}
	}
	attrs = append(attrs, o.backendAttr, o.keyAttr(key))
	ctx, s := o.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return ctx, tspan{s}
}

// event adds an event to the span.
func (t tspan) event(name string, attrs ...attribute.KeyValue) {
	if t.s != nil {
		t.s.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// end ends a request's span with its outcome, and the token it minted or
// kept (0: none).
func (t tspan) end(token uint64, err error) {
	if t.s == nil {
		return
	}
	oc := outcomeOf(err)
	t.s.SetAttributes(AttrOutcome.String(outcomeNames[oc]))
	if token != 0 {
		t.s.SetAttributes(AttrToken.Int64(tokenAttr(token)))
	}
	if oc != outOK && oc != outHeld {
		t.s.SetStatus(codes.Error, outcomeNames[oc]) // errors never show lease IDs
	}
	t.s.End()
}

// resends returns call, recording each call after the first as a
// "resend" event of ts when tracing.
func resends[T any](ts tspan, call func(context.Context) (T, error)) func(context.Context) (T, error) {
	if ts.s == nil {
		return call
	}
	sends := 0
	return func(ctx context.Context) (T, error) {
		if sends++; sends > 1 {
			ts.event("resend")
		}
		return call(ctx)
	}
}

// requestSpan starts the span of a grant or renewal (name "grant" or
// "renew") of req, unless ctx carries a Lock's wait (waitSpan), whose
// attempts are events of the wait span instead.
func (o *observer) requestSpan(ctx context.Context, op, key, owner string) (context.Context, tspan) {
	if o.tracer == nil || lockWaitFrom(ctx) != nil {
		return ctx, tspan{}
	}
	name := SpanRenew
	var attrs []attribute.KeyValue
	if op == "grant" {
		name = SpanGrant
		if owner != "" {
			attrs = append(attrs, AttrOwner.String(owner))
		}
	}
	return o.startSpan(ctx, name, key, trace.SpanKindClient, attrs...)
}

// attemptEvent records a grant attempt on the Lock wait ctx carries, if
// any.
func attemptEvent(ctx context.Context, err error) {
	if w := lockWaitFrom(ctx); w != nil {
		w.event("attempt", AttrOutcome.String(outcomeNames[outcomeOf(err)]))
	}
}

// lockWaitKey is the context key of a Lock's wait span.
type lockWaitKey struct{}

func lockWaitFrom(ctx context.Context) *tspan {
	if ctx == nil {
		return nil
	}
	w, _ := ctx.Value(lockWaitKey{}).(*tspan)
	return w
}

// heldSpan starts the span of a held lease, and returns ctx carrying it:
// the lease's Context, under which its renewals run.
func (o *observer) heldSpan(ctx context.Context, l Lease, owner string) (context.Context, tspan) {
	attrs := []attribute.KeyValue{AttrToken.Int64(tokenAttr(l.Token))}
	if owner != "" {
		attrs = append(attrs, AttrOwner.String(owner))
	}
	return o.startSpan(ctx, SpanHeld, l.Key, trace.SpanKindInternal, attrs...)
}

// heldEnd ends a held lease's span and records how long it was held, since
// start, and how it ended: "released" by its holder, "canceled" (its parent
// context ended), or why it was lost (a lostReason).
func (o *observer) heldEnd(t tspan, start time.Time, end string) {
	if t.s != nil {
		t.s.SetAttributes(AttrReason.String(end))
		if end != "released" && end != "canceled" {
			t.s.SetStatus(codes.Error, "lease lost: "+end)
		}
		t.s.End()
	}
	if !start.IsZero() && o.recording() && o.heldDur.Enabled(context.Background()) {
		o.heldDur.Record(context.Background(), time.Since(start).Seconds(), o.heldAttrs[heldEndIndex(end)])
	}
}

// lockObs records one Lock's wait: SpanLockWait, MetricLockWaiters,
// MetricLockWait or MetricLockGaveUp.
type lockObs struct {
	start   time.Time // zero: the wait's duration is not recorded
	span    tspan
	fifo    bool
	counted bool   // added to MetricLockWaiters
	key     string // counted in the observer's waitingOn (MetricLockHandoff)
	onKey   bool
}

// lockBegin starts recording a Lock's wait for key.
func (o *observer) lockBegin(ctx context.Context, key string, fifo bool) *lockObs {
	w := &lockObs{start: o.lockStart(ctx), fifo: fifo}
	_, w.span = o.startSpan(ctx, SpanLockWait, key, trace.SpanKindInternal, AttrFIFO.Bool(fifo))
	// The key is waited for (a release of it now counts as a handoff)
	// before the waiter shows in MetricLockWaiters: a reader who releases
	// the key once it sees the waiter gets the handoff recorded.
	if o.recording() && o.handoff.Enabled(ctx) {
		o.waitOn(key, 1)
		w.key, w.onKey = key, true
	}
	if o.recording() && o.waiters.Enabled(ctx) {
		o.waiting(ctx, fifo, 1)
		w.counted = true
	}
	return w
}

// waitContext returns wctx, Lock's wait context, carrying the wait's span
// (when tracing), so that its grant attempts are recorded as the span's
// events rather than as spans of their own.
func (w *lockObs) waitContext(wctx context.Context) context.Context {
	if w.span.s == nil {
		return wctx
	}
	return context.WithValue(wctx, lockWaitKey{}, &w.span)
}

// lockEnd records the end of the wait w under ctx: Lock got the lease of
// token, or gave up with err (timedOut: WithWaitTimeout ended the wait).
func (o *observer) lockEnd(ctx context.Context, w *lockObs, token uint64, timedOut bool, err error) {
	if w.counted {
		o.waiting(ctx, w.fifo, -1)
	}
	if w.onKey {
		o.waitOn(w.key, -1)
	}
	if err == nil {
		o.locked(ctx, w.start)
		if w.span.s != nil {
			w.span.s.SetAttributes(AttrToken.Int64(tokenAttr(token)))
		}
		w.span.end(0, nil)
		return
	}
	reason := gaveUpOf(ctx, timedOut, err)
	o.lockGaveUp(ctx, w.start, reason)
	if w.span.s != nil {
		w.span.s.SetAttributes(AttrReason.String(gaveUpNames[reason]))
	}
	w.span.end(0, err)
}

// tokenAttr is a token as an int64 attribute value (OpenTelemetry has no
// unsigned integers): tokens beyond its range, which only an epoch in the
// high bits makes, wrap to negative values.
func tokenAttr(token uint64) int64 { return int64(token) }
