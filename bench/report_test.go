package bench

// The one-command benchmark report: every store side by side with its
// peers, in interleaved rounds, printed as Markdown for
// docs/benchmarks.md.
//
//	cd bench && BENCH_REPORT=all go test -run '^TestReport$' -v -timeout 30m
//
// BENCH_REPORT names the sections to run ("all", or a comma-separated list
// such as "memory"); BENCH_ROUNDS sets the number of rounds (default 7) and
// BENCH_BATCH the time one contender's batch aims at (default 50ms).
// BENCH_PLOTS=dir also draws one plot per store run into dir (see
// plot_test.go; docs/img holds the committed ones).
//
// # Method
//
// A comparison pits our store against its peers on one operation at a fixed
// number of goroutines. Each round runs one batch of the same number of
// operations on every contender, in a fresh random order, and times it; the
// ratio of each peer to ours is taken within the round. A burst of load from
// another process then slows the contenders of that round alike, and the
// median of the per-round ratios ignores the bursts. The report prints the
// medians of ns/op, the per-round ratios, CPU per operation (this process's,
// and the server's where the store is a server) and allocations per
// operation.

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// reportSections are the report's parts in the order they print. A section
// adds comparisons and tables to the report; run is nil for a section not
// written yet.
var reportSections = []struct {
	name string
	run  func(t *testing.T, r *report)
}{
	{"memory", memorySection},         // vs the original single-mutex design; the Lock handoff
	{"redis", redisSection},           // vs redislock, redsync and PING; server CPU from INFO commandstats
	{"etcd", etcdSection},             // vs concurrency.Mutex (fresh and shared Session), Txn and Get floors
	{"sql", sqlSection},               // PostgreSQL vs pglock's table lease, advisory locks, SELECT 1; SQLite vs flock, the handoff too
	{"mysql", mysqlSection},           // MariaDB vs GET_LOCK+RELEASE_LOCK, a one-row UPDATE commit, SELECT 1
	{"nats", natsSection},             // NATS JetStream KV vs nlock's pattern, two KV Updates, Create+Delete, KV Get
	{"contention", contentionSection}, // etcd: the Lock handoff with 1, 8 and 32 waiters, FIFO on and off, vs concurrency.Mutex
}

func TestReport(t *testing.T) {
	want := os.Getenv("BENCH_REPORT")
	if want == "" {
		t.Skip("set BENCH_REPORT=all (or a list of sections: memory,redis,etcd) to run the benchmark report")
	}
	r := &report{
		rounds: envInt(t, "BENCH_ROUNDS", 7),
		batch:  envDuration(t, "BENCH_BATCH", 50*time.Millisecond),
	}
	before := readMachine()
	for _, s := range reportSections {
		if want != "all" && !slices.Contains(strings.Split(want, ","), s.name) {
			continue
		}
		if s.run == nil {
			r.notes = append(r.notes, fmt.Sprintf("Section %q: not written yet (TODO in bench/report_test.go).", s.name))
			continue
		}
		s.run(t, r)
	}
	var md strings.Builder
	r.print(io.MultiWriter(os.Stdout, &md), before, readMachine())
	writePlotsIfAsked(t, md.String(), before.at)
}

// report collects a run's results.
type report struct {
	rounds int
	batch  time.Duration // what one contender's batch aims to take
	comps  []*comparison
	memory []memoryRow
	notes  []string
}

// A contender is one store doing the operation under test.
type contender struct {
	name string
	// worker returns the function that worker w (of the comparison's
	// goroutines) calls for its i-th operation, i counting from 0 within
	// the batch. It is called before the batch is timed.
	worker func(w int) func(i int) error
	// serverCPU, when set, reads the CPU time the store's server has used
	// so far; nil means the store runs in this process.
	serverCPU func() (time.Duration, error)
}

// A comparison is one operation at one number of goroutines, ours (first)
// against its peers.
type comparison struct {
	store, op  string
	goroutines int
	contenders []contender
	ops        int        // operations per batch
	samples    [][]sample // contender -> round
}

// sample is one batch of one contender.
type sample struct {
	wall, cpu, server time.Duration
	allocs            uint64
}

// compare runs c in r.rounds interleaved rounds and adds it to the report.
func (r *report) compare(t *testing.T, c *comparison) {
	t.Helper()
	c.ops = r.calibrate(t, c)
	c.samples = make([][]sample, len(c.contenders))
	for range r.rounds {
		for _, i := range rand.Perm(len(c.contenders)) {
			s, err := runBatch(c.contenders[i], c.goroutines, c.ops)
			if err != nil {
				t.Fatalf("%s %s: %s: %v", c.store, c.op, c.contenders[i].name, err)
			}
			c.samples[i] = append(c.samples[i], s)
		}
	}
	r.comps = append(r.comps, c)
}

// calibrate returns how many operations make a batch of ours take about
// r.batch, after warming every contender up.
func (r *report) calibrate(t *testing.T, c *comparison) int {
	t.Helper()
	n := 100 * c.goroutines
	for {
		s, err := runBatch(c.contenders[0], c.goroutines, n)
		if err != nil {
			t.Fatalf("%s %s: %s: %v", c.store, c.op, c.contenders[0].name, err)
		}
		if s.wall >= r.batch/4 || n >= 1<<30 {
			n = max(int(float64(n)*float64(r.batch)/float64(max(s.wall, 1))), c.goroutines)
			break
		}
		n *= 4
	}
	for _, k := range c.contenders[1:] {
		if _, err := runBatch(k, c.goroutines, n/4); err != nil {
			t.Fatalf("%s %s: %s: %v", c.store, c.op, k.name, err)
		}
	}
	return n
}

// runBatch runs n operations of k spread over g goroutines and measures
// them.
func runBatch(k contender, g, n int) (sample, error) {
	fns := make([]func(int) error, g)
	for w := range fns {
		fns[w] = k.worker(w)
	}
	errs := make([]error, g)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for w := range fns {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			for i := range n / g {
				if err := fns[w](i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	ready.Wait()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	srv0, err := readServerCPU(k)
	if err != nil {
		return sample{}, err
	}
	cpu0 := processCPU()
	t0 := time.Now()
	close(start)
	done.Wait()
	wall := time.Since(t0)
	cpu1 := processCPU()
	srv1, err := readServerCPU(k)
	if err != nil {
		return sample{}, err
	}
	runtime.ReadMemStats(&m1)
	for _, err := range errs {
		if err != nil {
			return sample{}, err
		}
	}
	return sample{wall: wall, cpu: cpu1 - cpu0, server: srv1 - srv0, allocs: m1.Mallocs - m0.Mallocs}, nil
}

func readServerCPU(k contender) (time.Duration, error) {
	if k.serverCPU == nil {
		return 0, nil
	}
	return k.serverCPU()
}

// processCPU returns the user and system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perOp returns f of each sample divided by the batch's operations, in ns.
func (c *comparison) perOp(i int, f func(sample) float64) []float64 {
	out := make([]float64, len(c.samples[i]))
	for r, s := range c.samples[i] {
		out[r] = f(s) / float64(c.ops/c.goroutines*c.goroutines)
	}
	return out
}

func (c *comparison) wallNs(i int) []float64 {
	return c.perOp(i, func(s sample) float64 { return float64(s.wall) })
}

// ratios returns, per round, contender i's wall time over ours: above 1,
// ours is faster.
func (c *comparison) ratios(i int) []float64 {
	ours, peer := c.wallNs(0), c.wallNs(i)
	out := make([]float64, len(ours))
	for r := range ours {
		out[r] = peer[r] / ours[r]
	}
	return out
}

// allocsPerOp returns contender i's median allocations per operation.
func (c *comparison) allocsPerOp(i int) float64 {
	return median(c.perOp(i, func(s sample) float64 { return float64(s.allocs) }))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// memoryRow is the heap that n keys hold in each store.
type memoryRow struct {
	store   string
	keys    int
	keyLen  int          // bytes of each key
	perKey  []namedValue // contender -> heap bytes per key
	comment string
}

type namedValue struct {
	name  string
	value float64
}

// print writes the report as Markdown.
func (r *report) print(w io.Writer, before, after machine) {
	fmt.Fprintf(w, "\n## Benchmark report\n\n")
	fmt.Fprintf(w, "%s, %s/%s, GOMAXPROCS %d, %d CPUs (%s), clock source %s.\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU(), before.cpuModel, before.clockSource)
	fmt.Fprintf(w, "Load average %s before, %s after; other processes used %.2f cores on average during the run.\n",
		before.loadAvg, after.loadAvg, otherCores(before, after))
	fmt.Fprintf(w, "%d rounds; a batch of each contender aims at %v; ratio = peer time / our time per round (above 1: ours is faster).\n\n", r.rounds, r.batch)
	if len(r.comps) > 0 {
		fmt.Fprintln(w, "| store | operation | goroutines | contender | ns/op | ops/s | ratio | per-round ratios | CPU ns/op | server CPU ns/op | allocs/op |")
		fmt.Fprintln(w, "|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|")
		for _, c := range r.comps {
			for i, k := range c.contenders {
				ns := median(c.wallNs(i))
				cpu := median(c.perOp(i, func(s sample) float64 { return float64(s.cpu) }))
				allocs := c.allocsPerOp(i)
				ratio, rounds, server := "", "", ""
				if i > 0 {
					ratio = fmt.Sprintf("**%.2fx**", median(c.ratios(i)))
					rounds = formatRatios(c.ratios(i))
				}
				if k.serverCPU != nil {
					server = fmt.Sprintf("%.0f", median(c.perOp(i, func(s sample) float64 { return float64(s.server) })))
				}
				fmt.Fprintf(w, "| %s | %s | %d | %s | %.0f | %s | %s | %s | %.0f | %s | %.2f |\n",
					c.store, c.op, c.goroutines, k.name, ns, formatRate(1e9/ns), ratio, rounds, cpu, server, allocs)
			}
		}
		fmt.Fprintln(w)
	}
	if len(r.memory) > 0 {
		fmt.Fprintln(w, "| store | keys | key bytes | contender | heap B/key | beyond the key's bytes |")
		fmt.Fprintln(w, "|---|---:|---:|---|---:|---:|")
		for _, m := range r.memory {
			for _, v := range m.perKey {
				fmt.Fprintf(w, "| %s | %d | %d | %s | %.1f | %.1f |\n", m.store, m.keys, m.keyLen, v.name, v.value, v.value-float64(m.keyLen))
			}
		}
		fmt.Fprintln(w)
	}
	for _, n := range r.notes {
		fmt.Fprintln(w, n)
	}
}

func formatRatios(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, " ")
}

func formatRate(perSec float64) string {
	switch {
	case perSec >= 1e6:
		return fmt.Sprintf("%.2fM", perSec/1e6)
	case perSec >= 1e3:
		return fmt.Sprintf("%.1fk", perSec/1e3)
	}
	return fmt.Sprintf("%.0f", perSec)
}

// machine is what the report says about the machine it ran on.
type machine struct {
	cpuModel, clockSource, loadAvg string
	busy                           time.Duration // CPU time all processes used, from /proc/stat
	own                            time.Duration // this process's CPU time
	at                             time.Time
}

func readMachine() machine {
	m := machine{cpuModel: "unknown", clockSource: "unknown", loadAvg: "unknown", own: processCPU(), at: time.Now()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				m.cpuModel = strings.TrimSpace(value)
				break
			}
		}
	}
	if b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil {
		m.clockSource = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.loadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			if i >= 8 { // guest time is counted in user already
				break
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			m.busy += time.Duration(n) * 10 * time.Millisecond // USER_HZ is 100 on Linux
		}
	}
	return m
}

// otherCores returns how many cores other processes kept busy on average
// between two readings.
func otherCores(a, b machine) float64 {
	wall := b.at.Sub(a.at)
	if wall <= 0 || b.busy == 0 {
		return 0
	}
	return max(float64((b.busy-a.busy)-(b.own-a.own))/float64(wall), 0)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
