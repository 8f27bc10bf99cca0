package bench

// The soak: every backend in turn under mixed traffic while a nemesis
// kills and restarts its server, freezes a holder and stalls the network,
// with the invariants checked online and this process's resources and the
// store's sampled every interval.
//
//	cd bench && SOAK=60s go test -run '^TestSoak$' -v .
//
// SOAK is the time each backend runs (without it, a smoke of a few seconds
// per backend); SOAK_BACKENDS a comma-separated subset of memory, sqlite,
// postgres, mariadb, redis, etcd, kube (kube runs only under SOAK or
// when named here: see soakBackends); SOAK_WORKERS the traffic's goroutines per
// backend (default 8); SOAK_INTERVAL the sampling interval (default SOAK/30,
// between 0.5 s and 10 s); SOAK_CSV a directory for each backend's samples
// (time, goroutines, heap, RSS, FDs, connections, store records, ops/s,
// faults); SOAK_PLOTS a directory for soak-<backend>.png (those quantities
// against time, faults marked). See docs/scale.md.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/election"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/semaphore"
)

// soakConfig is one run's settings.
type soakConfig struct {
	dur, interval, ttl time.Duration
	workers            int
	smoke              bool
}

// The nemesis's timing, in TTLs: a stall outlives a lease's renewals, a
// freeze outlives the frozen lease, a server stays down about one TTL.
const (
	soakStallTTLs  = 1.5
	soakFreezeTTLs = 2
)

func TestSoak(t *testing.T) {
	cfg := soakConfig{dur: 3 * time.Second, ttl: time.Second, workers: 6, smoke: true}
	if os.Getenv("SOAK") != "" {
		cfg = soakConfig{dur: envDuration(t, "SOAK", 0), ttl: 2 * time.Second, workers: envInt(t, "SOAK_WORKERS", 8)}
	}
	cfg.interval = envDuration(t, "SOAK_INTERVAL", min(max(cfg.dur/30, 500*time.Millisecond), 10*time.Second))
	want := os.Getenv("SOAK_BACKENDS")
	var rows []string
	for _, b := range soakBackends {
		if want != "" && !slices.Contains(strings.Split(want, ","), b.name) {
			continue
		}
		if want == "" && cfg.smoke && b.soakOnly {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			row := soakRun(t, cfg, b.name, b.start(t, cfg.ttl))
			rows = append(rows, row)
		})
	}
	mode := "soak"
	if cfg.smoke {
		mode = "smoke (set SOAK=60s for a soak)"
	}
	t.Logf("TestSoak, %s: %v a backend, TTL %v, %d workers, sampled every %v; load %s; "+
		"a quantity's cell is its peak in the first quarter → its floor in the last quarter (its highest sample)\n\n%s\n%s",
		mode, cfg.dur, cfg.ttl, cfg.workers, cfg.interval, loadAvg(), soakHeader(), strings.Join(rows, "\n"))
}

// soakRun runs one backend and returns its row of the summary.
func soakRun(t *testing.T, cfg soakConfig, name string, st *soakStore) string {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	check := newSoakCheck(cancel)
	sem, err := semaphore.New(st.coord, soakSem, soakSemSize)
	if err != nil {
		t.Fatal(err)
	}
	tr := &soakTraffic{
		coord: st.coord, guard: guard.NewMemory(), check: check, ttl: cfg.ttl,
		elect: election.New(st.coord, soakElection, cfg.ttl, election.WithLockOptions(fencing.WithWaitTimeout(2*cfg.ttl))),
		sem:   sem,
		ops:   slices.DeleteFunc(slices.Clone(soakOps), func(op string) bool { return slices.Contains(st.without, op) }),
	}
	frozen := &soakFrozen{tr: tr, freeze: make(chan chan struct{})}
	smp := &soakSampler{st: st, tr: tr, start: check.start}

	var wg sync.WaitGroup
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	stop := sync.OnceFunc(func() {
		stopTraffic()
		wg.Wait()
	})
	defer stop() // also when a restart fails the test
	for i := range cfg.workers {
		wg.Go(func() { tr.worker(trafficCtx, i) })
	}
	wg.Go(func() { frozen.run(trafficCtx) })
	wg.Go(func() { smp.run(trafficCtx, cfg.interval) })
	var child *soakChild
	if st.child != "" {
		child = startSoakChild(t, tr, name, st.child)
		wg.Go(func() { child.run(trafficCtx) })
	}

	faults := soakNemesis(t, ctx, cfg, st, frozen, child, smp, check)
	smp.take(ctx) // the last sample, with the traffic still running
	stop()

	// After the last fault healed the store must serve again: one Lock
	// and guarded writes on a key of its own, bounded by a minute.
	var final error
	if ctx.Err() == nil {
		fctx, fcancel := context.WithTimeout(ctx, time.Minute)
		final = tr.final(fctx)
		fcancel()
	}
	total := time.Since(check.start)
	samples := smp.samples()
	cells, growth := creep(samples, total)

	if dir := os.Getenv("SOAK_CSV"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Error(err)
		}
		if err := smp.csv(filepath.Join(dir, "soak-"+name+".csv")); err != nil {
			t.Error(err)
		}
	}
	if dir := os.Getenv("SOAK_PLOTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Error(err)
		}
		title := fmt.Sprintf("soak: %s, %v, TTL %v, %d workers, load %s", name, total.Round(time.Second), cfg.ttl, cfg.workers, loadAvg())
		if err := smp.plot(filepath.Join(dir, "soak-"+name+".png"), title); err != nil {
			t.Error(err)
		}
	}
	breaches, history := check.report()
	if len(breaches) > 0 {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("soak-%s-%d.history", name, time.Now().Unix()))
		_ = os.WriteFile(path, []byte(history), 0o644)
		t.Errorf("%s: %d invariant breaches, the first: %s\nhistory (also in %s):\n%s", name, len(breaches), breaches[0], path, history)
	}
	if final != nil {
		t.Errorf("%s: after the faults, a Lock and a guarded write failed: %v", name, final)
	}
	for _, g := range growth {
		t.Errorf("%s: %s", name, g)
	}
	classes := tr.classes()
	if n := classes["other"]; n > 0 {
		v, _ := tr.sample.Load("other")
		t.Logf("%s: %d rounds failed with an unexpected error, the first: %v", name, n, v)
	}
	for class := range classes {
		if v, ok := tr.sample.Load(class); ok {
			t.Logf("%s: first %q error: %v", name, class, v)
		}
	}
	var errs []string
	for _, c := range []string{"busy", "lost", "fenced", "timeout", "store", "other"} {
		if n := classes[c]; n > 0 {
			errs = append(errs, fmt.Sprintf("%s %d", c, n))
		}
	}
	verdict := "ok"
	if t.Failed() {
		verdict = "FAIL"
	}
	ok := tr.ok.Load()
	childCell := "-"
	if child != nil {
		childCell = fmt.Sprintf("%d/%d", child.grants.Load(), child.late.Load())
	}
	return fmt.Sprintf("| %s | %.0f | %d | %.1f | %s | %s | %d/%d | %s | %d | %d | %d | %s | %s |",
		name, total.Seconds(), ok, float64(ok)/total.Seconds(), strings.Join(errs, ", "), faults,
		frozen.frozen.Load(), frozen.late.Load(), childCell, check.staleRefused, check.staleAdmitted, check.tokenBreaches,
		strings.Join(cells, " | "), verdict)
}

// soakHeader is the summary table's header.
func soakHeader() string {
	h := "| backend | s | rounds ok | ok/s | failed rounds by class | faults | frozen holder: freezes/late writes | child: grants/late writes | stale refused | stale admitted | token breaches |"
	for _, m := range soakMetrics {
		h += " " + m.name + " |"
	}
	h += " verdict |\n|" + strings.Repeat("---|", 12+len(soakMetrics))
	return h
}

// soakNemesis runs the faults on the test's goroutine, one at a time with
// a quiet gap before each, in turn: a network stall (the fault proxy stops
// carrying bytes), a frozen holder, a killed and restarted server. It runs
// them until cfg.dur has passed and every kind has run once, or a breach
// ends ctx, and returns their counts.
func soakNemesis(t *testing.T, ctx context.Context, cfg soakConfig, st *soakStore, frozen *soakFrozen, child *soakChild, smp *soakSampler, check *soakCheck) string {
	kinds := []string{"freeze"}
	if child != nil {
		kinds = append(kinds, "sigstop")
	}
	if st.proxy != nil {
		kinds = append([]string{"stall"}, kinds...)
	}
	if st.kill != nil {
		kinds = append(kinds, "kill")
	}
	gap := min(max(cfg.dur/20, cfg.ttl/2), 30*time.Second)
	counts := make(map[string]int)
	end := check.start.Add(cfg.dur)
	for i := 0; ctx.Err() == nil && (time.Now().Before(end) || i < len(kinds)); i++ {
		if !sleepCtx(ctx, gap) {
			break
		}
		kind := kinds[i%len(kinds)]
		check.event("nemesis: %s", kind)
		smp.mark(kind)
		switch kind {
		case "stall":
			st.proxy.SetMode(faultproxy.Pause)
			sleepCtx(ctx, time.Duration(soakStallTTLs*float64(cfg.ttl)))
			st.proxy.SetMode(faultproxy.Forward)
		case "freeze":
			thaw := make(chan struct{})
			select {
			case frozen.freeze <- thaw:
				sleepCtx(ctx, time.Duration(soakFreezeTTLs*float64(cfg.ttl)))
				close(thaw)
			case <-time.After(2 * cfg.ttl):
				kind = "freeze missed" // the frozen holder held no lease meanwhile
			case <-ctx.Done():
			}
		case "sigstop":
			if err := child.freeze(ctx, time.Duration(soakFreezeTTLs*float64(cfg.ttl))); err != nil {
				t.Errorf("SIGSTOP/SIGCONT of the child: %v", err)
			}
		case "kill":
			st.kill(t)
			sleepCtx(ctx, cfg.ttl)
			st.restart(t)
		}
		check.event("nemesis: %s ends", kind)
		counts[kind]++
	}
	var parts []string
	for _, k := range []string{"stall", "freeze", "freeze missed", "sigstop", "kill"} {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
		}
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		parts = append(parts, "ended: "+err.Error())
	}
	return strings.Join(parts, ", ")
}

// loadAvg is the machine's load average, as uptime prints it.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}
