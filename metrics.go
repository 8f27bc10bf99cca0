package fencing

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencing-go/fencing/backend"
)

// Metrics. A Coordinator records them through the OpenTelemetry metric API
// on the MeterProvider given with WithMeterProvider (by default the global
// one, which records nothing until an SDK is installed). Their attributes
// are few and bounded: the backend, the operation and the outcome, never
// the key or the lease ID. docs/metrics.md lists them with a Prometheus
// setup.
//
// The instrumentation scope is guard.MeterName, the guards' too; the
// guards' own metric (guard.MetricStaleTokens) is recorded on the provider
// each guard is given, not on the Coordinator's.
const (
	// MetricOperationDuration is a histogram (seconds) of the Coordinator's
	// requests to its backend, by backend, operation and outcome: one
	// sample per call, from its first attempt to its last, so the resends
	// of a request whose outcome was unknown are in its time, not samples
	// of their own.
	MetricOperationDuration = "fencing.operation.duration"
	// MetricGrants counts grant requests (Grant, Hold and each attempt of
	// Lock) by outcome; outcome "held" is a conflict with another holder.
	MetricGrants = "fencing.grants"
	// MetricRenewals counts renewals (Renew and the background renewals of
	// Hold and Lock) by outcome: "ok", or the reason they failed.
	MetricRenewals = "fencing.renewals"
	// MetricReleases counts leases ended by Release (operation "release")
	// or ForceRelease (operation "force_release", only when a live lease
	// was ended).
	MetricReleases = "fencing.releases"
	// MetricLeasesLost counts held leases (Hold, Lock, Do) that ended before
	// their holder released them, by reason: "rejected" (the coordinator
	// refused a renewal), "deadline" (no renewal was confirmed in time) or
	// "max_hold" (WithMaxHold's cap was reached).
	MetricLeasesLost = "fencing.leases.lost"
	// MetricLockWait is a histogram (seconds) of how long Lock waited
	// before it got the key.
	MetricLockWait = "fencing.lock.wait.duration"
	// MetricLockGaveUp is a histogram (seconds) of how long Lock waited
	// before it gave up without the key, by reason: "timeout"
	// (WithWaitTimeout), "canceled" (its context was canceled), "deadline"
	// (its context's deadline passed) or "error" (a request failed).
	MetricLockGaveUp = "fencing.lock.gave_up.duration"
	// MetricLockWaiters is a gauge (an up-down counter) of the Lock calls
	// waiting for their key now, by backend and AttrFIFO (true for those
	// waiting in the key's line, WithFIFO).
	MetricLockWaiters = "fencing.lock.waiters"
	// MetricHeldDuration is a histogram (seconds) of how long held leases
	// (Hold, Lock, Do) were held, from the grant to their end, by reason:
	// "released" by the holder, "canceled" (the parent context ended), or
	// why they were lost (as MetricLeasesLost's reason).
	MetricHeldDuration = "fencing.lease.held.duration"
	// MetricLockDelayRefusals counts grants refused because the key was in
	// a lock delay (WithLockDelay) after a lease's unclean end.
	MetricLockDelayRefusals = "fencing.lock_delay.refusals"
	// MetricLockHandoff is a histogram (seconds) of the handoffs a
	// Coordinator sees: from the send of a Release or ForceRelease of a key
	// that one of its Lock calls waits for (a release that fails counts
	// for nothing), to the key's next grant through it (that Lock's, or any
	// other). A release in another process is not seen: run
	// the waiters and the holders that hand over to them on one Coordinator
	// to measure handoffs, or read MetricLockWait.
	MetricLockHandoff = "fencing.lock.handoff.duration"
)

// meterName is the instrumentation scope, guard.MeterName (the root does
// not import package guard).
const meterName = "github.com/fencing-go/fencing"

// Attribute keys.
const (
	AttrBackend   = attribute.Key("fencing.backend")
	AttrOperation = attribute.Key("fencing.operation")
	AttrOutcome   = attribute.Key("fencing.outcome")
	AttrReason    = attribute.Key("fencing.reason")
	// AttrFIFO says a Lock waits in the key's line (WithFIFO): an
	// attribute of MetricLockWaiters, and of SpanLockWait.
	AttrFIFO = attribute.Key("fencing.fifo")
)

// WithMeterProvider makes the Coordinator record its metrics on mp (default
// otel.GetMeterProvider(), the global provider). A nil mp records nothing.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider, c.meterProviderSet = mp, true }
}

// WithLogger makes the Coordinator log what it does with l: grants,
// renewals and releases at Debug; failures, lost leases and forced releases
// at Warn. Logs name the key and the token, never the lease ID. The default
// (and a nil l) logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// op is one kind of request the Coordinator records.
type op int

const (
	opGrant op = iota
	opRenew
	opRelease
	opToken
	opInspect
	opForceRelease
	opList
	numOps
)

var opNames = [numOps]string{"grant", "renew", "release", "token", "inspect", "force_release", "list"}

// outcome is a request's result, as few values as a dashboard needs.
type outcome int

const (
	outOK outcome = iota
	outHeld
	outNotFound
	outExpired
	outUnknown
	outNoAnswer
	outInvalid
	outCanceled
	outUnsupported
	outClosed
	outError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "held", "not_found", "expired", "unknown", "no_answer", "invalid", "canceled", "unsupported", "closed", "error"}

func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return outOK
	case errors.Is(err, ErrLeaseHeld):
		return outHeld
	case errors.Is(err, ErrLeaseNotFound):
		return outNotFound
	case errors.Is(err, ErrLeaseExpired):
		return outExpired
	case errors.Is(err, ErrOutcomeUnknown):
		return outUnknown
	case errors.Is(err, ErrNoAnswer), errors.Is(err, context.DeadlineExceeded):
		return outNoAnswer // the server did not answer in time
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidTimeout), errors.Is(err, ErrInvalidMargin), errors.Is(err, ErrInvalidOption):
		return outInvalid
	case errors.Is(err, context.Canceled):
		return outCanceled
	case errors.Is(err, errors.ErrUnsupported):
		return outUnsupported
	case errors.Is(err, backend.ErrClosed):
		return outClosed
	}
	return outError
}

// observer records a Coordinator's metrics and logs. Every method is cheap
// when nothing is configured: on the global provider with no SDK installed,
// one atomic load per request (see recording), and a nil check for the
// logger.
type observer struct {
	log      *slog.Logger        // WithLogger; nil: no logs
	keyLabel func(string) string // WithKeyLabel; nil: keys are hashed (trace.go)

	tracer      trace.Tracer       // nil: no spans (trace.go)
	backendAttr attribute.KeyValue // the backend, for spans

	on    bool         // instruments were created
	meter metric.Meter // what they were made with, when on (storesize.go)
	// global is the provider the instruments were made on when it is the
	// global package's delegating default, else nil. Such a provider
	// records nothing until otel.SetMeterProvider installs another, and
	// from then on otel.GetMeterProvider returns that one instead.
	global   metric.MeterProvider
	duration metric.Float64Histogram
	grants   metric.Int64Counter
	renewals metric.Int64Counter
	releases metric.Int64Counter
	lost     metric.Int64Counter
	lockWait metric.Float64Histogram
	gaveUp   metric.Float64Histogram
	waiters  metric.Int64UpDownCounter
	heldDur  metric.Float64Histogram
	delayed  metric.Int64Counter
	handoff  metric.Float64Histogram

	// Handoffs (MetricLockHandoff): the keys Lock calls wait for now, with
	// how many, and when each such key was released, until its next grant.
	hmu        sync.Mutex
	waitingOn  map[string]int
	releasedAt map[string]time.Time

	// Attribute sets, built once so that recording allocates nothing.
	opAttrs     [numOps][numOutcomes]metric.MeasurementOption
	lostAttrs   [numLostReasons]metric.MeasurementOption
	bAttrs      metric.MeasurementOption // the backend alone
	gaveUpAttrs [numGaveUp]metric.MeasurementOption
	waitAttrs   [2]metric.MeasurementOption // by AttrFIFO: false, true
	heldAttrs   [len(heldEnds)]metric.MeasurementOption
}

// waitBuckets suit waits and holds, from a millisecond to an hour.
var waitBuckets = []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// durationBuckets suit requests from an in-process map (microseconds) to a
// remote server under load (seconds).
var durationBuckets = []float64{0.00001, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// init creates the instruments for backend b as cfg, the Coordinator's
// options, asks. It is called once by New.
func (o *observer) init(b backend.Backend, cfg *config) {
	o.log, o.keyLabel = cfg.logger, cfg.keyLabel
	o.backendAttr = AttrBackend.String(BackendName(b))
	if cfg.tracerProvider != nil {
		o.tracer = cfg.tracerProvider.Tracer(meterName)
	}
	mp := cfg.meterProvider
	if !cfg.meterProviderSet {
		mp = otel.GetMeterProvider()
	}
	if mp == nil {
		return
	}
	if isGlobalDelegate(mp) {
		o.global = mp
	}
	m := mp.Meter(meterName)
	var err error
	o.duration, err = m.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of fencing requests, by backend, operation and outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	o.grants = counter(m, MetricGrants, "{request}", "Grant requests, by outcome (held: a conflict with another holder).", &err)
	o.renewals = counter(m, MetricRenewals, "{request}", "Renewals, by outcome.", &err)
	o.releases = counter(m, MetricReleases, "{lease}", "Leases ended by Release or ForceRelease.", &err)
	o.lost = counter(m, MetricLeasesLost, "{lease}", "Leases lost while held, before their holder released them, by reason.", &err)
	lw, lwErr := m.Float64Histogram(MetricLockWait, metric.WithUnit("s"),
		metric.WithDescription("How long Lock waited for the key."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	o.lockWait = lw
	var cErr error
	o.gaveUp, cErr = m.Float64Histogram(MetricLockGaveUp, metric.WithUnit("s"),
		metric.WithDescription("How long Lock waited before it gave up without the key, by reason."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	err = errors.Join(err, cErr)
	o.waiters, cErr = m.Int64UpDownCounter(MetricLockWaiters, metric.WithUnit("{waiter}"),
		metric.WithDescription("Lock calls waiting for their key now."))
	err = errors.Join(err, cErr)
	o.heldDur, cErr = m.Float64Histogram(MetricHeldDuration, metric.WithUnit("s"),
		metric.WithDescription("How long held leases were held, from the grant to their end, by reason."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	err = errors.Join(err, cErr)
	o.delayed = counter(m, MetricLockDelayRefusals, "{request}", "Grants refused during a lock delay.", &err)
	o.handoff, cErr = m.Float64Histogram(MetricLockHandoff, metric.WithUnit("s"),
		metric.WithDescription("From the release of a key a Lock waited for to the key's next grant."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, cErr)
	if err != nil || lwErr != nil {
		otel.Handle(errors.Join(err, lwErr))
		if o.duration == nil || o.grants == nil || o.renewals == nil || o.releases == nil || o.lost == nil || o.lockWait == nil ||
			o.gaveUp == nil || o.waiters == nil || o.heldDur == nil || o.delayed == nil || o.handoff == nil {
			return // a broken provider: record nothing
		}
	}
	be := o.backendAttr
	for i := range numOps {
		for j := range numOutcomes {
			o.opAttrs[i][j] = metric.WithAttributeSet(attribute.NewSet(be, AttrOperation.String(opNames[i]), AttrOutcome.String(outcomeNames[j])))
		}
	}
	for i, r := range lostReasonNames {
		o.lostAttrs[i] = metric.WithAttributeSet(attribute.NewSet(be, AttrReason.String(r)))
	}
	o.bAttrs = metric.WithAttributeSet(attribute.NewSet(be))
	for i, r := range gaveUpNames {
		o.gaveUpAttrs[i] = metric.WithAttributeSet(attribute.NewSet(be, AttrReason.String(r)))
	}
	for i, fifo := range []bool{false, true} {
		o.waitAttrs[i] = metric.WithAttributeSet(attribute.NewSet(be, AttrFIFO.Bool(fifo)))
	}
	for i, r := range heldEnds {
		o.heldAttrs[i] = metric.WithAttributeSet(attribute.NewSet(be, AttrReason.String(r)))
	}
	o.waitingOn, o.releasedAt = map[string]int{}, map[string]time.Time{}
	o.meter, o.on = m, true
}

// globalPkg is the package of the delegating MeterProvider that
// otel.GetMeterProvider returns until otel.SetMeterProvider is called.
const globalPkg = "go.opentelemetry.io/otel/internal/global"

// isGlobalDelegate reports whether mp is the global package's delegating
// default provider. Its instruments forward to the provider installed later
// by otel.SetMeterProvider, and record nothing before.
func isGlobalDelegate(mp metric.MeterProvider) bool {
	t := reflect.TypeOf(mp)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == globalPkg
}

// recording reports whether an instrument may record: false without
// instruments, and false while they were made on the global default and
// no SDK has been installed since (otel.GetMeterProvider still returns the
// default). That costs one atomic load per call instead of one Enabled per
// instrument. Once an SDK is installed, each instrument's Enabled decides.
func (o *observer) recording() bool {
	return o.on && (o.global == nil || otel.GetMeterProvider() != o.global)
}

// add adds one to c if c is enabled.
func add(ctx context.Context, c metric.Int64Counter, attrs metric.MeasurementOption) {
	if c.Enabled(ctx) {
		c.Add(ctx, 1, attrs)
	}
}

func counter(m metric.Meter, name, unit, desc string, errp *error) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	*errp = errors.Join(*errp, err)
	return c
}

// BackendName is the value of the fencing.backend attribute for b: its
// Name() when it has a method Name() string, else the last element of its
// type's package path ("memorybackend", "etcdbackend", "redisbackend").
func BackendName(b backend.Backend) string {
	if n, ok := b.(interface{ Name() string }); ok {
		return n.Name()
	}
	t := reflect.TypeOf(b)
	if t == nil {
		return "nil"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return p[strings.LastIndexByte(p, '/')+1:]
	}
	return t.String()
}

// span is a request being recorded: whether metrics may be recorded (see
// recording), checked once when it began, and when it started (zero: its
// duration is not recorded, which saves reading the clock).
type span struct {
	rec   bool
	start time.Time
	// sent is when a release of a key a Lock call waits for was sent
	// (MetricLockHandoff); zero for other requests.
	sent time.Time
}

// begin starts recording a request.
func (o *observer) begin(ctx context.Context) span {
	if !o.recording() {
		return span{}
	}
	if o.duration.Enabled(ctx) {
		return span{rec: true, start: time.Now()}
	}
	return span{rec: true}
}

// beginRelease starts recording a release (or forced release) of key and,
// when a Lock call of the Coordinator waits for key, notes its send: the
// start of a handoff, should the waiter's grant follow. The note is made
// before the request goes out, because the waiter may be granted before
// the release's answer comes back.
func (o *observer) beginRelease(ctx context.Context, key string) span {
	sp := o.begin(ctx)
	if sp.rec && o.handoff.Enabled(ctx) {
		o.hmu.Lock()
		if o.waitingOn[key] > 0 {
			sp.sent = time.Now()
			o.releasedAt[key] = sp.sent
		}
		o.hmu.Unlock()
	}
	return sp
}

// request records a grant or renewal (k opGrant or opRenew) sent at start,
// which minted or kept token.
func (o *observer) request(ctx context.Context, k op, key string, start time.Time, token uint64, err error) {
	sp := span{rec: o.recording()}
	if sp.rec {
		sp.start = start
	}
	o.done(ctx, sp, k, key, token, err)
}

// done records a request of kind k begun as sp, and logs the mutating ones.
func (o *observer) done(ctx context.Context, sp span, k op, key string, token uint64, err error) {
	if sp.rec || o.log != nil {
		o.record(ctx, sp, k, key, token, err)
	}
}

// record is done's work when something may record or log.
func (o *observer) record(ctx context.Context, sp span, k op, key string, token uint64, err error) {
	if sp.rec {
		// Each call checks Enabled first: passing the options to a disabled
		// instrument would still allocate.
		attrs := o.opAttrs[k][outcomeOf(err)]
		if !sp.start.IsZero() && o.duration.Enabled(ctx) {
			o.duration.Record(ctx, time.Since(sp.start).Seconds(), attrs)
		}
		switch {
		case err == nil && k == opGrant:
			o.handoffGranted(ctx, key)
		case err != nil && !sp.sent.IsZero():
			o.handoffUnreleased(key, sp.sent)
		}
		switch {
		case k == opGrant:
			add(ctx, o.grants, attrs)
			var held *backend.HeldError
			if errors.As(err, &held) && held.Delayed {
				add(ctx, o.delayed, o.bAttrs)
			}
		case k == opRenew:
			add(ctx, o.renewals, attrs)
		case k == opRelease && err == nil:
			add(ctx, o.releases, attrs)
		}
	}
	if o.log != nil && k <= opRelease {
		o.logged(ctx, k, key, token, err)
	}
}

// forced records a ForceRelease begun as sp.
func (o *observer) forced(ctx context.Context, key string, sp span, ended bool, err error) {
	o.done(ctx, sp, opForceRelease, key, 0, err)
	if ended && err == nil && sp.rec {
		add(ctx, o.releases, o.opAttrs[opForceRelease][outOK])
	}
	if o.log != nil && err == nil {
		o.log.LogAttrs(ctx, slog.LevelWarn, "fencing: forced release", slog.String("key", key), slog.Bool("ended", ended))
	}
}

// waitOn adds delta to the Lock calls waiting for key (MetricLockHandoff);
// a key no one waits for any more is forgotten.
func (o *observer) waitOn(key string, delta int) {
	o.hmu.Lock()
	defer o.hmu.Unlock()
	n := o.waitingOn[key] + delta
	if n > 0 {
		o.waitingOn[key] = n
		return
	}
	delete(o.waitingOn, key)
	delete(o.releasedAt, key)
}

// handoffUnreleased forgets the release of key sent at sent, which failed,
// unless a grant has taken it already.
func (o *observer) handoffUnreleased(key string, sent time.Time) {
	o.hmu.Lock()
	defer o.hmu.Unlock()
	if at, ok := o.releasedAt[key]; ok && at.Equal(sent) {
		delete(o.releasedAt, key)
	}
}

// handoffGranted records a handoff when key was released while a Lock
// call waited for it.
func (o *observer) handoffGranted(ctx context.Context, key string) {
	o.hmu.Lock()
	at, ok := o.releasedAt[key]
	delete(o.releasedAt, key)
	o.hmu.Unlock()
	if ok && o.handoff.Enabled(ctx) {
		o.handoff.Record(ctx, time.Since(at).Seconds(), o.bAttrs)
	}
}

// locked records a Lock that got its key after waiting since start.
func (o *observer) locked(ctx context.Context, start time.Time) {
	if !start.IsZero() && o.recording() && o.lockWait.Enabled(ctx) {
		o.lockWait.Record(ctx, time.Since(start).Seconds(), o.bAttrs)
	}
}

// lockStart is now for Lock's wait, which has instruments of its own.
func (o *observer) lockStart(ctx context.Context) time.Time {
	if o.recording() && (o.lockWait.Enabled(ctx) || o.gaveUp.Enabled(ctx)) {
		return time.Now()
	}
	return time.Time{}
}

// gaveUp is why a Lock gave up waiting: the reason attribute of
// MetricLockGaveUp.
type gaveUp int

const (
	gaveUpTimeout gaveUp = iota
	gaveUpCanceled
	gaveUpDeadline
	gaveUpError
	numGaveUp
)

var gaveUpNames = [numGaveUp]string{"timeout", "canceled", "deadline", "error"}

// gaveUpOf is why a Lock that waited under ctx gave up with err; timedOut:
// WithWaitTimeout ended its wait.
func gaveUpOf(ctx context.Context, timedOut bool, err error) gaveUp {
	switch {
	case timedOut:
		return gaveUpTimeout
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return gaveUpCanceled
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrNoAnswer) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return gaveUpDeadline
	}
	return gaveUpError
}

// lockGaveUp records a Lock that gave up, for reason, after waiting since
// start.
func (o *observer) lockGaveUp(ctx context.Context, start time.Time, reason gaveUp) {
	if !start.IsZero() && o.recording() && o.gaveUp.Enabled(ctx) {
		o.gaveUp.Record(ctx, time.Since(start).Seconds(), o.gaveUpAttrs[reason])
	}
}

// waiting adds delta to the gauge of Lock's waiters.
func (o *observer) waiting(ctx context.Context, fifo bool, delta int64) {
	if o.recording() && o.waiters.Enabled(ctx) {
		i := 0
		if fifo {
			i = 1
		}
		o.waiters.Add(ctx, delta, o.waitAttrs[i])
	}
}

// heldEnds are the ways a held lease ends: the reason attribute of
// MetricHeldDuration and of SpanHeld.
var heldEnds = [...]string{"released", "canceled", lostReasonNames[lostRejected], lostReasonNames[lostDeadline], lostReasonNames[lostMaxHold]}

func heldEndIndex(end string) int {
	for i, e := range heldEnds {
		if e == end {
			return i
		}
	}
	return 0
}

// lostReason is why a held lease was lost: the reason attribute of
// MetricLeasesLost and of the log.
type lostReason int

const (
	lostRejected lostReason = iota
	lostDeadline
	lostMaxHold
	numLostReasons
)

var lostReasonNames = [numLostReasons]string{"rejected", "deadline", "max_hold"}

func lostReasonOf(err error) lostReason {
	switch {
	case errors.Is(err, ErrMaxHold):
		return lostMaxHold
	case errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseNotFound):
		return lostRejected
	}
	return lostDeadline
}

// leaseLost records a held lease lost with err.
func (o *observer) leaseLost(key string, token uint64, err error) {
	ctx := context.Background()
	reason := lostReasonOf(err)
	if o.recording() {
		add(ctx, o.lost, o.lostAttrs[reason])
	}
	if o.log != nil {
		o.log.LogAttrs(ctx, slog.LevelWarn, "fencing: lease lost", slog.String("key", key), slog.Uint64("token", token),
			slog.String("reason", lostReasonNames[reason]), slog.Any("error", err))
	}
}

// logged logs a grant, renewal or release. The wording and the level
// depend only on the outcome, so one situation logs alike on every backend:
// a verdict of the store (the lease ended, bad input) is "refused", at
// Debug; a request the caller canceled is "canceled", at Debug; a request
// that got no answer (none in time, whichever bound ended it, a connection
// error, an unknown outcome, a closed backend) is "failed", at Warn.
func (o *observer) logged(ctx context.Context, k op, key string, token uint64, err error) {
	level := slog.LevelDebug
	msg := "fencing: " + opNames[k]
	switch oc := outcomeOf(err); oc {
	case outOK, outHeld:
	case outNotFound, outExpired, outInvalid:
		msg += " refused"
	case outCanceled:
		msg += " canceled"
	default:
		msg += " failed"
		level = slog.LevelWarn
	}
	if !o.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("key", key)}
	if token != 0 {
		attrs = append(attrs, slog.Uint64("token", token))
	}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err)) // errors never show lease IDs
	}
	o.log.LogAttrs(ctx, level, msg, attrs...)
}
