package bench

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/fencing-go/fencing"
)

// waiterSettle is how long a handoff round lets the waiter start waiting
// (subscribe, try, be refused, sleep) before the holder releases.
const waiterSettle = 5 * time.Millisecond

// handoffOp is one kind of round of BenchmarkHandoff: it returns the time
// the round measures.
type handoffOp struct {
	name string
	fn   func() (time.Duration, error)
}

// handoffMedians runs rounds of ops while more says so, each round in a
// fresh random order, and returns each op's median in µs, by name.
func handoffMedians(t testing.TB, ops []handoffOp, more func() bool) map[string]float64 {
	t.Helper()
	times := make([][]time.Duration, len(ops))
	for more() {
		for _, i := range rand.Perm(len(ops)) {
			d, err := ops[i].fn()
			if err != nil {
				t.Fatalf("handoff: %s: %v", ops[i].name, err)
			}
			times[i] = append(times[i], d)
		}
	}
	medians := make(map[string]float64, len(ops))
	for i, op := range ops {
		medians[op.name] = medianMicros(times[i])
	}
	return medians
}

// handoffOps returns BenchmarkHandoff's rounds (see there), on clients and
// keys of their own.
func handoffOps(tb testing.TB) []handoffOp {
	tb.Helper()
	holderClient, waiterClient := newClient(tb), newClient(tb)
	ctx := context.Background()
	// Holder and waiter share a key space, each with its own client (and
	// connections): two Coordinators over two backends with one prefix.
	prefix := "bench:handoff:" + cryptorand.Text() + ":"
	holder := newCoordinatorPrefix(tb, holderClient, prefix)
	waiter := newCoordinatorPrefix(tb, waiterClient, prefix)
	lockHolder, lockWaiter := redislock.New(holderClient), redislock.New(waiterClient)
	lockKey := prefix + "redislock"
	if _, err := holder.Grant(ctx, "held", leaseTTL); err != nil {
		tb.Fatal(err)
	}

	// handoff runs one round: hold, start the waiter, release, and return
	// the time from the release returning to the waiter's lock returning.
	type result struct {
		at     time.Time
		unlock func() error
		err    error
	}
	handoff := func(hold func() (release func() error, err error), wait func() (unlock func() error, err error)) (time.Duration, error) {
		release, err := hold()
		if err != nil {
			return 0, err
		}
		got := make(chan result, 1)
		go func() {
			unlock, err := wait()
			got <- result{time.Now(), unlock, err}
		}()
		time.Sleep(waiterSettle)
		if err := release(); err != nil {
			return 0, err
		}
		released := time.Now()
		r := <-got
		if r.err != nil {
			return 0, r.err
		}
		return r.at.Sub(released), r.unlock()
	}
	fencingRound := func() (time.Duration, error) {
		return handoff(func() (func() error, error) {
			l, err := holder.Grant(ctx, "key", leaseTTL)
			return func() error { return holder.Release(ctx, "key", l.ID) }, err
		}, func() (func() error, error) {
			h, err := waiter.Lock(ctx, "key", leaseTTL)
			if err != nil {
				return nil, err
			}
			return func() error { return h.Release(ctx) }, nil
		})
	}
	redislockRound := func(backoff time.Duration) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			return handoff(func() (func() error, error) {
				l, err := lockHolder.Obtain(ctx, lockKey, leaseTTL, nil)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			}, func() (func() error, error) {
				opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(backoff)}
				l, err := lockWaiter.Obtain(ctx, lockKey, leaseTTL, opt)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			})
		}
	}
	return []handoffOp{
		{"fencing", fencingRound},
		{"redislock-1ms", redislockRound(time.Millisecond)},
		{"redislock-10ms", redislockRound(10 * time.Millisecond)},
		{"refused", func() (time.Duration, error) {
			start := time.Now()
			_, err := waiter.Grant(ctx, "held", leaseTTL)
			d := time.Since(start)
			if errors.Is(err, fencing.ErrLeaseHeld) {
				err = nil
			}
			return d, err
		}},
		{"ping", func() (time.Duration, error) {
			start := time.Now()
			err := holderClient.Ping(ctx).Err()
			return time.Since(start), err
		}},
	}
}

// BenchmarkHandoff measures a lock's handoff: the time from the holder's
// release returning to the waiting caller's lock call returning. Each
// round runs, in a shuffled order on one redis-server:
//
//   - fencing: a waiter in Coordinator.Lock (woken by the release script's
//     PUBLISH, then one grant) while another Coordinator holds the key;
//   - redislock-1ms, redislock-10ms: a waiter in redislock's Obtain with
//     LinearBackoff(1ms) and (10ms) while another client holds the lock;
//   - ping: one PING, the store's round trip in the same conditions;
//   - refused: one refused grant (a Coordinator.Grant on a held key), the
//     one script round trip a handoff cannot avoid.
//
// It reports each one's median (µs) and fencing's handoff in PING round
// trips and in refused grants.
func BenchmarkHandoff(b *testing.B) {
	ops := handoffOps(b)
	median := handoffMedians(b, ops, b.Loop)
	for _, op := range ops {
		b.ReportMetric(median[op.name], op.name+"-µs")
	}
	b.ReportMetric(median["fencing"]/median["ping"], "fencing/ping")
	b.ReportMetric(median["fencing"]/median["refused"], "fencing/refused")
	b.ReportMetric(median["fencing"]/median["redislock-1ms"], "fencing/redislock-1ms")
	b.ReportMetric(median["fencing"]/median["redislock-10ms"], "fencing/redislock-10ms")
	b.ReportMetric(0, "ns/op")
}

// countdown returns a condition for handoffMedians that holds n times.
func countdown(n int) func() bool {
	return func() bool {
		n--
		return n >= 0
	}
}

// timedHandoff is one kind of round of timedHandoffTable: fn hands a lock over
// once and returns the time from the holder's release call, and from its
// return, to the waiter's lock call returning.
type timedHandoff struct {
	name  string // the table's row
	short string // the contender in the ratio lines
	fn    func() (fromCall, fromReturn time.Duration, err error)
}

// timedHandoffTable runs rounds rounds of kinds, each round in a fresh random
// order, and returns a Markdown table of each one's median, minimum and
// maximum in µs, from the release's return and from its call, then the
// ratio of kinds[0]'s medians to each other kind's.
func timedHandoffTable(t *testing.T, kinds []timedHandoff, rounds int) string {
	t.Helper()
	fromCall := make([][]float64, len(kinds))
	fromReturn := make([][]float64, len(kinds))
	for range rounds {
		for _, i := range rand.Perm(len(kinds)) {
			call, ret, err := kinds[i].fn()
			if err != nil {
				t.Fatalf("handoff: %s: %v", kinds[i].name, err)
			}
			fromCall[i] = append(fromCall[i], float64(call.Microseconds()))
			fromReturn[i] = append(fromReturn[i], float64(ret.Microseconds()))
		}
	}
	var b strings.Builder
	fmt.Fprintln(&b, "| contender | from the release's return: median | min | max | from the release's call: median | min | max |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|")
	for i, k := range kinds {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", k.name,
			median(fromReturn[i]), slices.Min(fromReturn[i]), slices.Max(fromReturn[i]),
			median(fromCall[i]), slices.Min(fromCall[i]), slices.Max(fromCall[i]))
	}
	// Per-round ratios are meaningless here (a handoff can end before the
	// release returns: 0 µs or less), so the ratio is of the medians, and
	// none of a median at or below 0.
	ratio := func(a, b []float64) string {
		if median(b) <= 0 {
			return "none (its median is not above 0 µs)"
		}
		return fmt.Sprintf("%.2fx", median(a)/median(b))
	}
	for i, k := range kinds[1:] {
		fmt.Fprintf(&b, "\nHandoff from the release's return, %s / %s (medians): **%s**. From the release's call: %s.\n",
			kinds[0].short, k.short, ratio(fromReturn[0], fromReturn[i+1]), ratio(fromCall[0], fromCall[i+1]))
	}
	return b.String()
}
