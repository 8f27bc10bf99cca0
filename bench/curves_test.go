package bench

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// TestCurves measures how the cost of the library grows with the store
// (docs/scale.md, "Curves"). It runs only when asked:
//
//	cd bench && CURVES=keys,waiters CURVES_OUT=dir go test -run '^TestCurves$' -v -timeout 60m .
//
// CURVES names the curves (keys, waiters), CURVES_BACKENDS the backends
// (default memory,sqlite,postgres,mariadb,redis,etcd,kube), and CURVES_OUT a
// directory for one CSV file per curve and backend (keys-<backend>.csv,
// waiters-<backend>.csv), from which TestCurvesPlot draws. The other knobs
// are read by each curve (curvesKeys, curvesWaiters).
func TestCurves(t *testing.T) {
	which := os.Getenv("CURVES")
	if which == "" {
		t.Skip("set CURVES=keys,waiters,processes to measure the curves (docs/scale.md)")
	}
	names := strings.Split(envString("CURVES_BACKENDS", "memory,sqlite,postgres,mariadb,redis,etcd,kube"), ",")
	out := os.Getenv("CURVES_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("load at the start: %s", loadAvg())
	for _, curve := range strings.Split(which, ",") {
		for _, name := range names {
			open := curveStores[name]
			if open == nil {
				t.Fatalf("CURVES_BACKENDS: no backend %q", name)
			}
			t.Run(curve+"/"+name, func(t *testing.T) {
				var rows [][]string
				switch curve {
				case "keys":
					rows = curvesKeys(t, name, open)
				case "waiters":
					rows = curvesWaiters(t, name, open)
				case "processes":
					rows = curvesProcesses(t, name, open)
				default:
					t.Fatalf("CURVES: no curve %q (keys, waiters, processes)", curve)
				}
				if err := writeCSV(filepath.Join(out, curve+"-"+name+".csv"), rows); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	t.Logf("load at the end: %s", loadAvg())
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInts(t *testing.T, name, def string) []int {
	var ns []int
	for _, f := range strings.Split(envString(name, def), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("%s: %q is not a positive integer", name, f)
		}
		ns = append(ns, n)
	}
	return ns
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// curveTTL is the TTL of the curves' leases.
const curveTTL = 30 * time.Second

// liveKeys keeps leases on keys live, renewing each every curveTTL/3 on
// one goroutine, as the live share of a store's keys would be.
type liveKeys struct {
	b    backend.Backend
	mu   sync.Mutex
	ids  map[string]string // key -> lease ID
	keys []string
	errs int
}

func (l *liveKeys) add(ctx context.Context, key string) error {
	id := cryptorand.Text()
	if _, err := l.b.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: curveTTL}); err != nil {
		return fmt.Errorf("grant live key %s: %w", key, err)
	}
	l.mu.Lock()
	l.ids[key] = id
	l.keys = append(l.keys, key)
	l.mu.Unlock()
	return nil
}

// renew renews every lease in a pass every curveTTL/4 until ctx ends, and
// grants again a key whose lease a renewal found lost (counted in errs).
func (l *liveKeys) renew(ctx context.Context) {
	tick := time.NewTicker(curveTTL / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.mu.Lock()
		keys := slices.Clone(l.keys)
		l.mu.Unlock()
		for _, key := range keys {
			l.mu.Lock()
			id := l.ids[key]
			l.mu.Unlock()
			_, err := l.b.Renew(ctx, backend.Request{Key: key, LeaseID: id, Timeout: curveTTL})
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				l.mu.Lock()
				l.errs++
				l.mu.Unlock()
				id = cryptorand.Text()
				if _, err := l.b.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: curveTTL}); err == nil {
					l.mu.Lock()
					l.ids[key] = id
					l.mu.Unlock()
				}
			}
		}
	}
}

// grantRelease grants and releases key through b and returns how long the
// two took.
func grantRelease(ctx context.Context, b backend.Backend, key string) (time.Duration, error) {
	id := cryptorand.Text()
	start := time.Now()
	if _, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: id, Timeout: curveTTL}); err != nil {
		return 0, fmt.Errorf("grant %s: %w", key, err)
	}
	if err := b.Release(ctx, key, id); err != nil {
		return 0, fmt.Errorf("release %s: %w", key, err)
	}
	return time.Since(start), nil
}

// curvesKeys measures Grant+Release on random idle keys, and the store's
// bytes per key, as the store grows through CURVES_SIZES keys (default
// 1000,10000,100000,1000000; etcd stops at CURVES_ETCD_MAX and kube at
// CURVES_KUBE_MAX, default 100000 each), about 1 % of them live and renewed (at most CURVES_LIVE_MAX,
// default 1000), measured CURVES_SETTLE (default 10 s) after each fill. CURVES_OPS (default 400) Grant+Release pairs a size go
// to the store under test, each followed by one to a reference store of
// 1000 keys of the same backend (another server, database file or
// instance) that does not grow: the ratio of the two medians takes out
// most of the machine's changing load.
func curvesKeys(t *testing.T, name string, open func(*testing.T, string) *curveStore) [][]string {
	sizes := envInts(t, "CURVES_SIZES", "1000,10000,100000,1000000")
	if name == "etcd" || name == "kube" {
		limit := envInt(t, "CURVES_"+strings.ToUpper(name)+"_MAX", 100000)
		sizes = slices.DeleteFunc(sizes, func(n int) bool { return n > limit })
	}
	ops := envInt(t, "CURVES_OPS", 400)
	liveMax := envInt(t, "CURVES_LIVE_MAX", 1000)
	settle := envDuration(t, "CURVES_SETTLE", 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const refSize = 1000
	ref := open(t, "ref")
	st := open(t, "main")
	t.Logf("%s: filled by %s", name, st.fillHow)
	if err := ref.fill(ctx, 0, refSize); err != nil {
		t.Fatalf("fill the reference: %v", err)
	}
	refLive := &liveKeys{b: ref.b, ids: map[string]string{}}
	for i := range refSize / 100 {
		if err := refLive.add(ctx, keyName(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.fill(ctx, 0, 0); err != nil { // the template alone
		t.Fatalf("template: %v", err)
	}
	base, err := st.bytes(ctx)
	if err != nil {
		t.Fatalf("bytes: %v", err)
	}
	live := &liveKeys{b: st.b, ids: map[string]string{}}
	var wg sync.WaitGroup
	wg.Go(func() { live.renew(ctx) })
	wg.Go(func() { refLive.renew(ctx) })
	defer wg.Wait()
	defer cancel()

	rows := [][]string{{"backend", "keys", "live", "p50_us", "p99_us", "ref_p50_us", "ref_p99_us", "ratio_p50", "bytes_per_key", "size_ms", "fill_s", "load"}}
	have, nLive := 0, 0
	for _, n := range sizes {
		fillStart := time.Now()
		if n > have {
			if err := st.fill(ctx, have, n); err != nil {
				t.Fatalf("fill to %d: %v", n, err)
			}
			have = n
		}
		fillTook := time.Since(fillStart)
		time.Sleep(settle) // the store's own work after a bulk write (etcd's snapshot, autovacuum)
		for ; nLive < min(n/100, liveMax); nLive++ {
			if err := live.add(ctx, keyName(nLive)); err != nil {
				t.Fatal(err)
			}
		}
		bytes, err := st.bytes(ctx)
		if err != nil {
			t.Fatalf("bytes: %v", err)
		}
		var lat, refLat []float64
		for range ops {
			d, err := grantRelease(ctx, st.b, keyName(nLive+rand.IntN(n-nLive)))
			if err != nil {
				t.Fatal(err)
			}
			lat = append(lat, float64(d.Nanoseconds())/1000)
			d, err = grantRelease(ctx, ref.b, keyName(refSize/100+rand.IntN(refSize-refSize/100)))
			if err != nil {
				t.Fatal(err)
			}
			refLat = append(refLat, float64(d.Nanoseconds())/1000)
		}
		var sizeTook []float64
		for range 3 {
			start := time.Now()
			if _, err := st.b.(backend.Sizer).Size(ctx); err != nil {
				t.Fatalf("Size: %v", err)
			}
			sizeTook = append(sizeTook, float64(time.Since(start).Microseconds())/1000)
		}
		p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
		r50, r99 := percentile(refLat, 0.5), percentile(refLat, 0.99)
		perKey := float64(bytes-base) / float64(n)
		t.Logf("%s %8d keys (%d live): Grant+Release p50 %7.1f µs p99 %8.1f µs; reference p50 %7.1f p99 %8.1f; ratio %.2f; %5.0f bytes/key; Size %.1f ms; filled in %v; load %s",
			name, n, nLive, p50, p99, r50, r99, p50/r50, perKey, percentile(sizeTook, 0.5), fillTook.Round(time.Millisecond), loadAvg())
		rows = append(rows, []string{name, strconv.Itoa(n), strconv.Itoa(nLive), f0(p50), f0(p99), f0(r50), f0(r99),
			strconv.FormatFloat(p50/r50, 'f', 3, 64), f0(perKey), strconv.FormatFloat(percentile(sizeTook, 0.5), 'f', 2, 64),
			strconv.FormatFloat(fillTook.Seconds(), 'f', 1, 64), loadAvg()})
	}
	live.mu.Lock()
	if live.errs > 0 {
		t.Logf("%d renewals of live keys failed (those keys were granted again)", live.errs)
	}
	live.mu.Unlock()
	return rows
}

func f0(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// curvesWaiters measures handoffs of one key among CURVES_WAITERS waiters
// (default 1,32,256,1000), with and without WithFIFO: each waiter locks
// the key, releases it at once and locks it again. The waiters are
// spread over up to 8 backends of the store (each its own pool or client,
// as 8 processes would have; memory has one), each with its own
// Coordinator, its SPI calls counted. After a warm-up (the first handoff,
// or 3 s), it measures for CURVES_WAIT_TIME (default 10 s): handoffs (from
// the start of the holder's Release to the next Lock's return), requests
// per handoff, and the store's own load halfway. CURVES_FIFO (both, true,
// false) runs only one of the two; CURVES_LOCK_TTL (default 10 s) is
// Lock's TTL, which sets how often a waiting FIFO waiter renews its entry,
// and CURVES_POLL, when set, Lock's WithPollInterval.
func curvesWaiters(t *testing.T, name string, open func(*testing.T, string) *curveStore) [][]string {
	waiters := envInts(t, "CURVES_WAITERS", "1,32,256,1000")
	window := envDuration(t, "CURVES_WAIT_TIME", 10*time.Second)
	st := open(t, "main")
	rows := [][]string{{"backend", "waiters", "fifo", "clients", "handoffs", "p50_us", "p99_us", "requests_per_handoff", "by_method", "load", "errors", "machine_load"}}
	fifos := []bool{false, true}
	switch v := envString("CURVES_FIFO", "both"); v {
	case "both":
	case "true", "false":
		fifos = []bool{v == "true"}
	default:
		t.Fatalf("CURVES_FIFO=%q: want both, true or false", v)
	}
	if _, ok := st.b.(backend.Queuer); !ok {
		fifos = slices.DeleteFunc(fifos, func(f bool) bool { return f }) // WithFIFO needs a line of waiters
	}
	for _, fifo := range fifos {
		for _, n := range waiters {
			t.Run(fmt.Sprintf("%d/fifo=%v", n, fifo), func(t *testing.T) {
				row := waitersPoint(t, name, st, n, fifo, window)
				rows = append(rows, row)
			})
		}
	}
	return rows
}

func waitersPoint(t *testing.T, name string, st *curveStore, n int, fifo bool, window time.Duration) []string {
	counts := &requestCounts{}
	clients := min(n, 8)
	if name == "memory" {
		clients = 1
	}
	coords := make([]*fencing.Coordinator, clients)
	for i := range coords {
		b := st.b
		if i > 0 {
			b = st.another(t)
		}
		coords[i] = fencing.New(countRequests(b, counts))
	}
	key := fmt.Sprintf("curves/hot/%d/%v", n, fifo)
	lockTTL := envDuration(t, "CURVES_LOCK_TTL", 10*time.Second)
	var opts []fencing.LockOption
	if fifo {
		opts = append(opts, fencing.WithFIFO())
	}
	if os.Getenv("CURVES_POLL") != "" {
		opts = append(opts, fencing.WithPollInterval(envDuration(t, "CURVES_POLL", fencing.DefaultPollInterval)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		mu           sync.Mutex
		releaseStart time.Time
		measuring    bool
		lat          []float64
		handoffs     int
		firstHandoff = make(chan struct{})
		errs         []string
	)
	var wg sync.WaitGroup
	for i := range n {
		c := coords[i%clients]
		wg.Go(func() {
			for ctx.Err() == nil {
				h, err := c.Lock(ctx, key, lockTTL, opts...)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						errs = append(errs, err.Error())
						mu.Unlock()
						time.Sleep(100 * time.Millisecond)
					}
					continue
				}
				now := time.Now()
				mu.Lock()
				if !releaseStart.IsZero() {
					if handoffs == 0 {
						close(firstHandoff)
					}
					handoffs++
					if measuring {
						lat = append(lat, float64(now.Sub(releaseStart).Microseconds()))
					}
				}
				releaseStart = time.Now()
				mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := h.Release(rctx); err != nil && ctx.Err() == nil {
					mu.Lock()
					errs = append(errs, "release: "+err.Error())
					mu.Unlock()
				}
				rcancel()
			}
		})
	}
	select {
	case <-firstHandoff:
	case <-time.After(3 * time.Second):
	}
	time.Sleep(time.Second) // every waiter has joined
	mu.Lock()
	measuring, lat = true, nil
	before, h0 := counts.snapshot(), handoffs
	mu.Unlock()
	time.Sleep(window / 2)
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	load := st.load(lctx)
	lcancel()
	time.Sleep(window - window/2)
	mu.Lock()
	measuring = false
	after, hs := counts.snapshot(), handoffs-h0
	mu.Unlock()
	cancel()
	wg.Wait()

	d, total := diffCounts(before, after)
	p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
	perHandoff := float64(total) / float64(max(hs, 1))
	t.Logf("%s %4d waiters fifo=%-5v on %d clients: %4d handoffs p50 %7.0f µs p99 %8.0f µs; %.1f requests a handoff (%s); %s; %d errors; load %s",
		name, n, fifo, clients, hs, p50, p99, perHandoff, formatCounts(d, hs), load, len(errs), loadAvg())
	if len(errs) > 0 {
		t.Logf("first error: %s", errs[0])
	}
	if hs == 0 {
		t.Errorf("no handoff in %v", window)
	}
	return []string{name, strconv.Itoa(n), strconv.FormatBool(fifo), strconv.Itoa(clients), strconv.Itoa(hs), f0(p50), f0(p99),
		strconv.FormatFloat(perHandoff, 'f', 2, 64), formatCounts(d, hs), load, strconv.Itoa(len(errs)), loadAvg()}
}
