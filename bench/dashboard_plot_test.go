package bench

import (
	"context"
	"fmt"
	"image/color"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/fencing-go/fencing"
)

// TestDashboardPlot draws panels of the Grafana dashboard
// (docs/grafana/fencing.json) from a real run: workers contend for three
// keys on the in-memory backend (their number rising from 1 to 12 and
// falling back, half of them waiting in line with WithFIFO, each wait
// bounded at 100-400 ms, each hold 5 ms and an exponential 30 ms), and an
// operator force-releases a batch job's lease every two seconds. The
// Prometheus exporter is read every step, and each panel's query is
// evaluated on the samples as Prometheus would (histogram_quantile's
// interpolation in a bucket, rates and increases over a window of four
// steps). A panel the dashboard no longer has, or one the run left empty,
// fails it. With BENCH_PLOTS=dir it runs for a minute and writes
// dir/dashboard.png; docs/img/dashboard.png is made with
//
//	cd bench && BENCH_PLOTS=../docs/img go test -run '^TestDashboardPlot$' -count=1 .
//
// Without it, a short run draws into a temporary directory.
func TestDashboardPlot(t *testing.T) {
	dir := os.Getenv("BENCH_PLOTS")
	run, step := 3*time.Second, 250*time.Millisecond
	if dir != "" {
		run, step = time.Minute, time.Second
	} else {
		dir = t.TempDir()
	}
	titles := dashboardTitles(t)
	samples := contentionSamples(t, run, step)
	const window = 4
	panels := []struct {
		title  string
		unit   string
		series func(s []scrape) map[string]plotter.XYs
	}{
		{"Lock wait p50 / p99", "seconds", quantiles("fencing_lock_wait_duration_seconds", window)},
		{"Held duration p50 / p99", "seconds", quantiles("fencing_lease_held_duration_seconds", window)},
		{"Waiters", "waiters", gauge("fencing_lock_waiters", "fencing_fifo")},
		{"Contention rate", "refused / all grant attempts", contentionRate(window)},
		{"Waits that gave up", "per second", rates("fencing_lock_gave_up_duration_seconds", "fencing_reason", window, true)},
		{"Lost leases by reason", fmt.Sprintf("leases per %v", window*step), rates("fencing_leases_lost_total", "fencing_reason", window, false)},
	}
	const w, h = 14 * vg.Inch, 7 * vg.Inch
	img, body := titledCanvas(w, h, 100, fmt.Sprintf("docs/grafana/fencing.json's panels, from a %v contention on the in-memory backend (%s)", run, time.Now().UTC().Format("2006-01-02 15:04 UTC")))
	tiles := draw.Tiles{Rows: 2, Cols: 3, PadX: 24, PadY: 24}
	for i, p := range panels {
		if !titles[p.title] {
			t.Fatalf("the dashboard has no panel %q", p.title)
		}
		pl := plot.New()
		pl.Title.Text = p.title
		pl.X.Label.Text = "seconds into the run"
		pl.Y.Label.Text = p.unit
		pl.Y.Min = 0
		pl.Legend.Top, pl.Legend.Left = true, true
		pl.Add(plotter.NewGrid())
		series := p.series(samples)
		names := make([]string, 0, len(series))
		for name := range series {
			names = append(names, name)
		}
		sort.Strings(names)
		for j, name := range names {
			if len(series[name]) == 0 {
				continue
			}
			l, err := plotter.NewLine(series[name])
			if err != nil {
				t.Fatal(err)
			}
			l.Color, l.Width = plotColors[j%len(plotColors)], 2
			pl.Add(l)
			pl.Legend.Add(name, l)
		}
		if len(names) == 0 {
			t.Errorf("panel %q: the run recorded nothing for it", p.title)
		}
		pl.Y.Max *= 1.3 // room for the legend above the lines
		pl.Draw(tiles.At(body, i%3, i/3))
	}
	file := filepath.Join(dir, "dashboard.png")
	if err := writePNG(file, img); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", file)
}

var plotColors = []color.Color{colorOurs, colorPeer, color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}}

// dashboardTitles returns the titles of the dashboard's panels.
func dashboardTitles(t *testing.T) map[string]bool {
	titles := map[string]bool{}
	for _, p := range readDashboard(t).Panels {
		titles[p.Title] = true
	}
	return titles
}

// scrape is one read of the exporter: its metric families by name.
type scrape struct {
	at   float64 // seconds into the run
	fams map[string]*dto.MetricFamily
}

// contentionSamples runs TestDashboardPlot's contention for run and reads
// the exporter every step.
func contentionSamples(t *testing.T, run, step time.Duration) []scrape {
	reg, _, c := exportedCoordinator(t)
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	start := time.Now()
	const workers = 12
	active := func() int { // 1 to workers and back, a triangle over the run
		x := float64(time.Since(start)) / float64(run)
		return 1 + int((1-math.Abs(2*x-1))*(workers-1)+0.5)
	}
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	keys := []string{"orders/1", "orders/2", "orders/3"}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 1))
			for ctx.Err() == nil {
				if i >= active() {
					pause(50 * time.Millisecond)
					continue
				}
				opts := []fencing.LockOption{fencing.WithWaitTimeout(time.Duration(100+r.IntN(300)) * time.Millisecond)}
				if i%2 == 0 {
					opts = append(opts, fencing.WithFIFO())
				}
				h, err := c.Lock(ctx, keys[r.IntN(len(keys))], 2*time.Second, opts...)
				if err != nil {
					continue // gave up waiting, or the run is over
				}
				pause(5*time.Millisecond + time.Duration(r.ExpFloat64()*30*float64(time.Millisecond)))
				h.Release(context.Background())
			}
		})
	}
	wg.Go(func() { // a batch job whose lease an operator ends
		for ctx.Err() == nil {
			h, err := c.Hold(ctx, "batch", 2*time.Second, fencing.WithRenewInterval(50*time.Millisecond))
			if err != nil {
				return
			}
			pause(300 * time.Millisecond)
			c.ForceRelease(context.Background(), "batch")
			<-h.Done()
			h.Release(context.Background())
			pause(1700 * time.Millisecond)
		}
	})
	var samples []scrape
	tick := time.NewTicker(step)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		s := scrape{at: time.Since(start).Seconds(), fams: map[string]*dto.MetricFamily{}}
		for _, f := range fams {
			s.fams[f.GetName()] = f
		}
		samples = append(samples, s)
	}
	wg.Wait()
	return samples
}

// label returns the value of m's label name.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantiles evaluates histogram_quantile(q, sum by (le) (rate(name_bucket[window])))
// for q = 0.5 and 0.99: a point per scrape where the window saw values.
func quantiles(name string, window int) func([]scrape) map[string]plotter.XYs {
	return func(s []scrape) map[string]plotter.XYs {
		out := map[string]plotter.XYs{}
		for i := window; i < len(s); i++ {
			bounds, now := buckets(s[i], name)
			_, then := buckets(s[i-window], name)
			total := now[len(now)-1] - then[len(then)-1]
			if total <= 0 {
				continue
			}
			for _, q := range []float64{0.5, 0.99} {
				key := fmt.Sprintf("p%g", q*100)
				out[key] = append(out[key], plotter.XY{X: s[i].at, Y: quantile(q, bounds, now, then)})
			}
		}
		return out
	}
}

// buckets returns a histogram's upper bounds (the last +Inf) and cumulative
// counts, summed over its series.
func buckets(s scrape, name string) (bounds, cum []float64) {
	f := s.fams[name]
	if f == nil {
		return []float64{math.Inf(1)}, []float64{0}
	}
	for j, m := range f.GetMetric() {
		h := m.GetHistogram()
		for k, b := range h.GetBucket() {
			if j == 0 {
				bounds, cum = append(bounds, b.GetUpperBound()), append(cum, 0)
			}
			cum[k] += float64(b.GetCumulativeCount())
		}
		if j == 0 {
			bounds, cum = append(bounds, math.Inf(1)), append(cum, 0)
		}
		cum[len(cum)-1] += float64(h.GetSampleCount())
	}
	return bounds, cum
}

// quantile is Prometheus's histogram_quantile on the counts now minus then:
// the bucket where the rank falls, interpolated linearly in it.
func quantile(q float64, bounds, now, then []float64) float64 {
	total := now[len(now)-1] - then[len(then)-1]
	rank := q * total
	lower, below := 0.0, 0.0
	for k, upper := range bounds {
		c := now[k] - then[k]
		if c >= rank {
			if math.IsInf(upper, 1) {
				return lower
			}
			return lower + (upper-lower)*(rank-below)/(c-below)
		}
		lower, below = upper, c
	}
	return lower
}

// gauge evaluates sum by (by) (name): a line per value of by.
func gauge(name, by string) func([]scrape) map[string]plotter.XYs {
	return func(s []scrape) map[string]plotter.XYs {
		out := map[string]plotter.XYs{}
		for _, x := range s {
			sums := map[string]float64{}
			if f := x.fams[name]; f != nil {
				for _, m := range f.GetMetric() {
					sums[by+"="+label(m, by)] += m.GetGauge().GetValue()
				}
			}
			for k, v := range sums {
				out[k] = append(out[k], plotter.XY{X: x.at, Y: v})
			}
		}
		return out
	}
}

// counts returns name's counter (or a histogram's count) summed by the
// value of label by.
func counts(s scrape, name, by string) map[string]float64 {
	sums := map[string]float64{}
	if f := s.fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue()
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			sums[label(m, by)] += v
		}
	}
	return sums
}

// rates evaluates sum by (by) (rate(name[window])), or increase when
// perSecond is false: a line per value of by.
func rates(name, by string, window int, perSecond bool) func([]scrape) map[string]plotter.XYs {
	return func(s []scrape) map[string]plotter.XYs {
		out := map[string]plotter.XYs{}
		for i := window; i < len(s); i++ {
			now, then := counts(s[i], name, by), counts(s[i-window], name, by)
			for k, v := range now {
				d := v - then[k]
				if perSecond {
					d /= s[i].at - s[i-window].at
				}
				out[by+"="+k] = append(out[by+"="+k], plotter.XY{X: s[i].at, Y: d})
			}
		}
		return out
	}
}

// contentionRate evaluates rate(fencing_grants_total{fencing_outcome="held"})
// / rate(fencing_grants_total) over window.
func contentionRate(window int) func([]scrape) map[string]plotter.XYs {
	return func(s []scrape) map[string]plotter.XYs {
		var xys plotter.XYs
		for i := window; i < len(s); i++ {
			now, then := counts(s[i], "fencing_grants_total", "fencing_outcome"), counts(s[i-window], "fencing_grants_total", "fencing_outcome")
			var all float64
			for k, v := range now {
				all += v - then[k]
			}
			if all > 0 {
				xys = append(xys, plotter.XY{X: s[i].at, Y: (now["held"] - then["held"]) / all})
			}
		}
		return map[string]plotter.XYs{"refused (held)": xys}
	}
}
