// Package contentiontest runs a contention on a backend with an
// OpenTelemetry SDK installed (the in-memory span recorder and a manual
// metric reader) and checks the spans and contention metrics a
// Coordinator records: each backend's tests call Run with their
// conformance harness.
package contentiontest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/metrictest"
)

// Run takes a key on b with Hold, makes one Lock give up waiting for it
// (WithWaitTimeout) and another wait until the holder releases it, and
// checks what was recorded: the spans (fencing.grant, fencing.held,
// fencing.lock.wait with its attempts as events, fencing.release), their
// parents and attributes, no lease ID or raw key anywhere in them, and the
// held-duration, wait, gave-up, handoff and waiter metrics. The backend is h's, on
// an empty key space, closed when t ends.
func Run(t *testing.T, h conformance.Harness) {
	t.Helper()
	b, err := h.NewBackend(context.Background(), t)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	// Long enough for the backend's minimum: the holder releases its lease
	// long before it would expire, and Hold renews it meanwhile.
	ttl := max(h.Traits().MinTTL, 5*time.Second)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	mr := metrictest.New(t)
	c := fencing.New(b, fencing.WithTracerProvider(tp), fencing.WithMeterProvider(mr))
	key := "contention/customer-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, root := tp.Tracer("contentiontest").Start(context.Background(), "test")

	holder, err := c.Hold(ctx, key, ttl, fencing.WithOwner("holder-1"))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	if _, err := c.Lock(ctx, key, ttl, fencing.WithWaitTimeout(100*time.Millisecond)); err == nil {
		t.Fatal("Lock got the held key")
	}
	got := make(chan *fencing.Held, 1)
	errc := make(chan error, 1)
	go func() {
		h, err := c.Lock(ctx, key, ttl, fencing.WithOwner("waiter-2"))
		got <- h
		errc <- err
	}()
	// Release once the waiter is counted as waiting (observed, not slept).
	for mr.Sum(t, fencing.MetricLockWaiters) != 1 {
		select {
		case err := <-errc:
			t.Fatalf("Lock returned while the key was held: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	waiter := <-got
	if err := <-errc; err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := waiter.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	root.End()

	ids := []string{holder.Lease().ID, waiter.Lease().ID}
	spans := sr.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = append(byName[s.Name()], s)
		checkNoSecrets(t, s, key, ids)
	}
	sum := sha256.Sum256([]byte(key))
	hash := hex.EncodeToString(sum[:8])
	want := map[string]string{
		string(fencing.AttrBackend): fencing.BackendName(b),
		string(fencing.AttrKeyHash): hash,
	}
	for _, name := range []string{fencing.SpanGrant, fencing.SpanHeld, fencing.SpanLockWait, fencing.SpanRelease} {
		if len(byName[name]) == 0 {
			t.Errorf("no %s span; spans: %v", name, names(spans))
		}
		for _, s := range byName[name] {
			for k, v := range want {
				if got := attr(s, k); got != v {
					t.Errorf("%s: %s = %q, want %q", name, k, got, v)
				}
			}
			if s.Parent().TraceID() != root.SpanContext().TraceID() {
				t.Errorf("%s is not in the test's trace", name)
			}
		}
	}
	// Hold's grant and both held leases are the caller's children.
	for _, s := range append(byName[fencing.SpanGrant], byName[fencing.SpanHeld]...) {
		if s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s's parent is %v, want the caller's span", s.Name(), s.Parent().SpanID())
		}
	}
	owners := map[string]string{}
	for _, s := range byName[fencing.SpanHeld] {
		owners[attr(s, string(fencing.AttrOwner))] = attr(s, string(fencing.AttrReason))
		if attr(s, string(fencing.AttrToken)) == "" {
			t.Errorf("held span without a token")
		}
	}
	if owners["holder-1"] != "released" || owners["waiter-2"] != "released" {
		t.Errorf("held spans by owner (reason): %v, want holder-1 and waiter-2 released", owners)
	}
	reasons := map[string]int{}
	for _, s := range byName[fencing.SpanLockWait] {
		reasons[attr(s, string(fencing.AttrReason))]++
		attempts := 0
		for _, e := range s.Events() {
			if e.Name == "attempt" {
				attempts++
			}
		}
		if attempts == 0 && attr(s, string(fencing.AttrReason)) == "" {
			t.Errorf("a Lock that got the key has no attempt events")
		}
	}
	if reasons["timeout"] != 1 || reasons[""] != 1 {
		t.Errorf("lock wait spans by reason: %v, want one timeout and one that got the key", reasons)
	}

	if n := mr.Count(t, fencing.MetricHeldDuration, fencing.AttrReason, "released"); n != 2 {
		t.Errorf("%s{reason=released}: %d values, want 2", fencing.MetricHeldDuration, n)
	}
	if n := mr.Count(t, fencing.MetricLockWait, "", ""); n != 1 {
		t.Errorf("%s: %d values, want 1", fencing.MetricLockWait, n)
	}
	if n := mr.Count(t, fencing.MetricLockHandoff, "", ""); n != 1 {
		t.Errorf("%s: %d values, want 1 (the holder's release to the waiter's grant)", fencing.MetricLockHandoff, n)
	}
	if n := mr.Count(t, fencing.MetricLockGaveUp, fencing.AttrReason, "timeout"); n != 1 {
		t.Errorf("%s{reason=timeout}: %d values, want 1", fencing.MetricLockGaveUp, n)
	}
	if n := mr.Sum(t, fencing.MetricLockWaiters); n != 0 {
		t.Errorf("%s: %d after every Lock returned, want 0", fencing.MetricLockWaiters, n)
	}
}

// checkNoSecrets fails t if any attribute of s or of its events holds a
// lease ID or the raw key.
func checkNoSecrets(t *testing.T, s sdktrace.ReadOnlySpan, key string, ids []string) {
	t.Helper()
	all := append([]attribute.KeyValue{}, s.Attributes()...)
	for _, e := range s.Events() {
		all = append(all, e.Attributes...)
	}
	text := s.Name() + " " + s.Status().Description
	for _, kv := range all {
		text += " " + string(kv.Key) + "=" + kv.Value.Emit()
	}
	for _, id := range ids {
		if id != "" && strings.Contains(text, id) {
			t.Errorf("span %s shows a lease ID: %s", s.Name(), text)
		}
	}
	if strings.Contains(text, key) {
		t.Errorf("span %s shows the raw key: %s", s.Name(), text)
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
