package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// soakSample is what the sampler reads at the end of each interval; a
// field it could not read (the server was down) is -1.
type soakSample struct {
	at                            time.Duration // since the run began
	goroutines, fds, conns, store int
	heap, rss                     int64 // bytes: live heap after a GC, resident set
	ok                            int64 // rounds done so far
	faults                        string
}

// soakMetric is one quantity the creep check judges.
type soakMetric struct {
	name  string
	get   func(soakSample) int64
	slack int64 // added to the bound, for the noise of small counts
	unit  int64 // printed divided by this
}

// soakMetrics and their slacks: a few goroutines and connections come and
// go with each fault (a reconnect, a watch re-established), a few MiB of
// heap with the GC's pacing.
var soakMetrics = []soakMetric{
	{"goroutines", func(s soakSample) int64 { return int64(s.goroutines) }, 50, 1},
	{"heap MiB", func(s soakSample) int64 { return s.heap }, 16 << 20, 1 << 20},
	{"RSS MiB", func(s soakSample) int64 { return s.rss }, 64 << 20, 1 << 20},
	{"FDs", func(s soakSample) int64 { return int64(s.fds) }, 20, 1},
	{"conns", func(s soakSample) int64 { return int64(s.conns) }, 16, 1},
	{"store", func(s soakSample) int64 { return int64(s.store) }, 64, 1},
}

// soakCreepFactor is how much a metric's floor at the end may exceed its
// peak in the first quarter of the run, before the slack.
const soakCreepFactor = 1.5

// creep judges growth: for each metric, peak is its highest value in the
// samples of the first quarter of the run (warm-up: the pools filling,
// the first keys written, at least one sample), floor its lowest in the
// last quarter (at least one sample). A leak raises the floor, where a
// fault's passing spike does not. The check fails when
// floor > 1.5*peak + slack. It returns a cell per metric ("peak→floor
// (highest)") and the failures.
func creep(samples []soakSample, total time.Duration) (cells []string, failures []string) {
	for _, m := range soakMetrics {
		peak, floor, top := int64(-1), int64(-1), int64(-1)
		for i, s := range samples {
			v := m.get(s)
			if v < 0 {
				continue
			}
			top = max(top, v)
			if s.at <= total/4 || i == 0 {
				peak = max(peak, v)
			}
			if s.at >= total*3/4 || i == len(samples)-1 {
				if floor < 0 || v < floor {
					floor = v
				}
			}
		}
		cells = append(cells, fmt.Sprintf("%d→%d (%d)", peak/m.unit, floor/m.unit, top/m.unit))
		if peak < 0 || floor < 0 {
			continue
		}
		bound := int64(float64(peak)*soakCreepFactor) + m.slack
		if floor > bound {
			failures = append(failures, fmt.Sprintf("%s grew: lowest in the last quarter %d, above 1.5 x the first quarter's peak %d + %d = %d",
				m.name, floor/m.unit, peak/m.unit, m.slack/m.unit, bound/m.unit))
		}
	}
	return cells, failures
}

// soakSampler samples this process and the store every interval.
type soakSampler struct {
	st     *soakStore
	tr     *soakTraffic
	start  time.Time
	mu     sync.Mutex
	faults []string // marked since the last sample
	all    []soakSample
	marks  []soakMark // every fault, for the plot
}

// soakMark is a fault's start.
type soakMark struct {
	at   time.Duration
	kind string
}

// mark notes a fault, for the next sample.
func (s *soakSampler) mark(fault string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, fault)
	s.marks = append(s.marks, soakMark{time.Since(s.start), fault})
}

// run samples every interval until ctx ends.
func (s *soakSampler) run(ctx context.Context, interval time.Duration) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			s.take(ctx)
		}
	}
}

// take reads one sample.
func (s *soakSampler) take(ctx context.Context) soakSample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp := soakSample{
		at:         time.Since(s.start),
		goroutines: runtime.NumGoroutine(),
		heap:       int64(ms.HeapAlloc),
		rss:        rss(),
		fds:        openFDs(),
		ok:         s.tr.ok.Load(),
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var err error
	if smp.conns, err = s.st.conns(rctx); err != nil {
		smp.conns = -1
	}
	if smp.store, err = s.st.size(rctx); err != nil {
		smp.store = -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	smp.faults = strings.Join(s.faults, "+")
	s.faults = nil
	s.all = append(s.all, smp)
	return smp
}

// samples returns the samples taken so far.
func (s *soakSampler) samples() []soakSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]soakSample(nil), s.all...)
}

// openFDs counts this process's open file descriptors (-1 if unreadable).
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// rss reads this process's resident set size in bytes (-1 if unreadable).
func rss() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

// csv writes the samples as CSV, ops/s per interval and faults included.
func (s *soakSampler) csv(path string) error {
	var b strings.Builder
	b.WriteString("seconds,goroutines,heap_bytes,rss_bytes,fds,conns,store_records,ops_per_s,faults\n")
	var prev soakSample
	for _, smp := range s.samples() {
		rate := float64(smp.ok-prev.ok) / (smp.at - prev.at).Seconds()
		fmt.Fprintf(&b, "%.1f,%d,%d,%d,%d,%d,%d,%.1f,%s\n", smp.at.Seconds(), smp.goroutines, smp.heap, smp.rss,
			smp.fds, smp.conns, smp.store, rate, smp.faults)
		prev = smp
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
