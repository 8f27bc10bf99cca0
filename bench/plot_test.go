package bench

// Plots of the report: one PNG per store, drawn from the report's Markdown
// (readReport), so the plots of a fresh run (TestReport with BENCH_PLOTS)
// and those of the run printed in RUNLOG.md (TestPlotsFromDoc) come
// from the same code.

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// TestPlotsFromDoc draws the plots of the run whose report the run log
// RUNLOG.md prints (its section "The latest full run"). With
// BENCH_PLOTS=dir it writes them there; the committed ones are made with
//
//	cd bench && BENCH_PLOTS=../docs/img go test -run '^TestPlotsFromDoc$' -count=1 .
//
// Without it, it draws them into a temporary directory, which checks that
// the page still holds a report this code can read.
func TestPlotsFromDoc(t *testing.T) {
	page, err := os.ReadFile("RUNLOG.md")
	if err != nil {
		t.Fatal(err)
	}
	section, ok := markdownSection(string(page), "## The latest full run")
	if !ok {
		t.Fatal(`RUNLOG.md has no section "## The latest full run"`)
	}
	run := regexp.MustCompile(`run of (\d{4}-\d\d-\d\d \d\d:\d\d UTC)`).FindStringSubmatch(section)
	if run == nil {
		t.Fatal(`RUNLOG.md, "The latest full run": no "run of YYYY-MM-DD hh:mm UTC" says which run it is`)
	}
	stores, err := readReport(section)
	if err != nil {
		t.Fatalf("RUNLOG.md: %v", err)
	}
	for _, name := range []string{"memory", "redis", "etcd"} {
		s := stores[name]
		if s == nil || len(s.results) == 0 || len(s.handoff) == 0 {
			t.Fatalf("RUNLOG.md: the latest run has no %s results or no %s handoff table", name, name)
		}
	}
	dir := os.Getenv("BENCH_PLOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	files, err := writePlots(dir, stores, "run of "+run[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 10_000 {
			t.Errorf("%s: %d bytes, not a drawn PNG", f, len(b))
		}
	}
	t.Logf("wrote %s", strings.Join(files, ", "))
}

// TestReadReport checks readReport on a report as print writes it.
func TestReadReport(t *testing.T) {
	r := &report{rounds: 1, batch: 1}
	c := &comparison{store: "etcd, fsync on", op: "Grant+Release", goroutines: 32, ops: 32,
		contenders: []contender{{name: "ours"}, {name: "Mutex"}},
		samples:    [][]sample{{{wall: 3200}}, {{wall: 6400}}}}
	r.comps = append(r.comps, c)
	r.notes = append(r.notes, "\n| round | µs | in PINGs |\n|---|---:|---:|\n| fencing | 46.6 | 2.21 |\n| ping | 21.1 | 1.00 |\n")
	r.notes = append(r.notes, "| waiters | contender | handoffs | from the release's call: median | p90 | from its return: median | p90 | / Mutex | grant attempts woken by a release | grant attempts per handoff | etcd Txns per handoff | etcd requests per handoff | to the longest waiter |\n"+
		"|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"+
		"| 32 | Lock | 16 | 4630 | 15586 | 1039 | 5024 | **3.63x** | 32.00 | 33.00 | 34.00 | 98.00 | 0% |\n"+
		"| 32 | Mutex | 16 | 1249 | 1818 | 351 | 729 |  | 0.00 | 1.00 | 1.00 | 5.00 | 100% |\n\n"+
		"| waiters | contender | Txn | Range | Put | DeleteRange | LeaseGrant | LeaseRevoke | LeaseTimeToLive | other |\n"+
		"|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"+
		"| 32 | Mutex | 1.00 | 3.00 | 0.00 | 1.00 | 0.00 | 0.00 | 0.00 | 0.00 |\n")
	// etcd's handoff table and SQLite's, of the same shape, in one report.
	r.notes = append(r.notes, "etcd handoff, 3 rounds each:\n\n"+
		"| contender | from the release's return: median | min | max |\n|---|---:|---:|---:|\n"+
		"| ours: Held.Release → Coordinator.Lock | 455 | 238 | 900 |\n| Mutex: Unlock → Lock | 546 | 337 | 900 |\n")
	r.notes = append(r.notes, "\nLock handoff on SQLite between two processes, 3 rounds each:\n\n"+
		"| contender | from the release's return: median | min | max |\n|---|---:|---:|---:|\n"+
		"| ours: Coordinator.Release → Coordinator.Lock | 14589 | 2136 | 98451 |\n| flock(2) | 54 | 30 | 90 |\n")
	var b bytes.Buffer
	r.print(&b, machine{}, machine{})
	stores, err := readReport(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if got := stores["etcd"]; got == nil || len(got.results) != 2 || got.results[1] != (result{"Grant+Release (fsync on)", "Mutex", 32, 200}) {
		t.Errorf("etcd results = %+v, want ours 100 ns/op and Mutex 200 ns/op at 32 goroutines", got)
	}
	if got := stores["redis"]; got == nil || !slices.Equal(got.handoff, []handoff{{"fencing", 46.6}, {"ping", 21.1}}) {
		t.Errorf("redis handoff = %+v", got)
	}
	if got := stores["etcd"]; got == nil || !slices.Equal(got.handoff, []handoff{{"ours", 455}, {"Mutex", 546}}) {
		t.Errorf("etcd handoff = %+v, want etcd's table only", got)
	}
	if got := stores["sql"]; got == nil || !slices.Equal(got.handoff, []handoff{{"ours", 14589}, {"flock(2)", 54}}) {
		t.Errorf("sql handoff = %+v, want SQLite's table", got)
	}
	if got := stores["contention"]; got == nil || !slices.Equal(got.contention, []contentionRow{{32, "Lock", 4630, 15586, 32}, {32, "Mutex", 1249, 1818, 0}}) {
		t.Errorf("contention = %+v", got)
	}
}

// writePlotsIfAsked writes the plots of a report printed as md, begun at
// start, into BENCH_PLOTS, when that is set.
func writePlotsIfAsked(t *testing.T, md string, start time.Time) {
	dir := os.Getenv("BENCH_PLOTS")
	if dir == "" {
		return
	}
	stores, err := readReport(md)
	if err != nil {
		t.Fatalf("plots: %v", err)
	}
	files, err := writePlots(dir, stores, "run of "+start.UTC().Format("2006-01-02 15:04 UTC"))
	if err != nil {
		t.Fatalf("plots: %v", err)
	}
	t.Logf("wrote %s", strings.Join(files, ", "))
}

// result is one row of the report's main table.
type result struct {
	op, contender string
	goroutines    int
	nsPerOp       float64
}

// handoff is one row of a handoff table: a contender's median in µs.
type handoff struct {
	name string
	us   float64
}

// storeResults is what the plots show of one store.
type storeResults struct {
	results    []result
	handoff    []handoff
	contention []contentionRow // the contention handoff's (store "contention")
}

// readReport reads the tables of a report as print writes them (the main
// table, the memory table, which no plot shows, and each store's handoff
// table), by store: "etcd, fsync on" rows are etcd's, their operation
// marked "(fsync on)".
func readReport(md string) (map[string]*storeResults, error) {
	stores := map[string]*storeResults{}
	get := func(name string) *storeResults {
		if stores[name] == nil {
			stores[name] = &storeResults{}
		}
		return stores[name]
	}
	for _, tb := range markdownTables(md) {
		h := tb.header
		switch {
		case len(h) >= 5 && h[0] == "store" && h[1] == "operation" && h[2] == "goroutines" && h[4] == "ns/op":
			for _, row := range tb.rows {
				g, err1 := strconv.Atoi(row[2])
				ns, err2 := strconv.ParseFloat(row[4], 64)
				if err := errors.Join(err1, err2); err != nil {
					return nil, fmt.Errorf("report row %q: %w", strings.Join(row, " | "), err)
				}
				store, variant, _ := strings.Cut(row[0], ",")
				op := row[1]
				if variant != "" {
					op += " (" + strings.TrimSpace(variant) + ")"
				}
				s := get(store)
				s.results = append(s.results, result{op, row[3], g, ns})
			}
		case len(h) >= 3 && h[0] == "round" && h[1] == "µs":
			store := "redis"
			if h[2] == "in cold grant+releases" {
				store = "memory"
			}
			for _, row := range tb.rows {
				us, err := strconv.ParseFloat(row[1], 64)
				if err != nil {
					return nil, fmt.Errorf("%s handoff row %q: %w", store, strings.Join(row, " | "), err)
				}
				get(store).handoff = append(get(store).handoff, handoff{row[0], us})
			}
		case len(h) >= 2 && h[0] == "contender" && strings.HasPrefix(h[1], "from the release's return"):
			// etcd's handoff table, or SQLite's (the SQL section's) of
			// the same shape: the text above it names the store.
			store := "etcd"
			if strings.Contains(tb.intro, "SQLite") {
				store = "sql"
			}
			for _, row := range tb.rows {
				us, err := strconv.ParseFloat(row[1], 64)
				if err != nil {
					return nil, fmt.Errorf("%s handoff row %q: %w", store, strings.Join(row, " | "), err)
				}
				name, _, _ := strings.Cut(row[0], ":")
				get(store).handoff = append(get(store).handoff, handoff{name, us})
			}
		case len(h) >= 3 && h[0] == "waiters" && h[1] == "contender" && h[2] == "handoffs":
			for _, row := range tb.rows {
				c, err := readContentionRow(row)
				if err != nil {
					return nil, fmt.Errorf("contention row %q: %w", strings.Join(row, " | "), err)
				}
				get("contention").contention = append(get("contention").contention, c)
			}
		}
	}
	if len(stores) == 0 {
		return nil, fmt.Errorf("no report table found")
	}
	return stores, nil
}

// mdTable is a Markdown table: its header's cells and its rows' cells.
type mdTable struct {
	header []string
	rows   [][]string
	intro  string // the last line of text before the table
}

// markdownTables returns the tables of md, each row's cells trimmed and
// stripped of bold marks.
func markdownTables(md string) []mdTable {
	var tables []mdTable
	var cur *mdTable
	intro := ""
	for line := range strings.Lines(md) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			cur = nil
			if line != "" {
				intro = line
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i, c := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(c), "*")
		}
		switch {
		case cur == nil:
			tables = append(tables, mdTable{header: cells, intro: intro})
			cur = &tables[len(tables)-1]
		case strings.Trim(cells[0], "-: ") == "":
			// the separator row
		case len(cells) == len(cur.header):
			cur.rows = append(cur.rows, cells)
		}
	}
	return tables
}

// markdownSection returns the section of md under the heading line
// heading, up to the next heading of the same or a higher level.
func markdownSection(md, heading string) (string, bool) {
	level := strings.Count(strings.Fields(heading)[0], "#")
	start := -1
	var b strings.Builder
	for line := range strings.Lines(md) {
		if start < 0 {
			if strings.TrimSpace(line) == heading {
				start = 0
			}
			continue
		}
		if f := strings.Fields(line); len(f) > 0 && strings.Trim(f[0], "#") == "" && len(f[0]) <= level {
			break
		}
		b.WriteString(line)
	}
	return b.String(), start == 0
}

// Colors of the plots: our store, its peers, and floors (the store's own
// round trip or primitive, which no lock can beat).
var (
	colorOurs  = color.RGBA{R: 0x1f, G: 0x6f, B: 0xc0, A: 0xff}
	colorPeer  = color.RGBA{R: 0xe0, G: 0x7b, B: 0x1a, A: 0xff}
	colorFloor = color.RGBA{R: 0xa0, G: 0xa0, B: 0xa0, A: 0xff}
	peerLines  = []color.Color{
		colorPeer,
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
)

// kindColor returns the color of a contender by its name in the report.
func kindColor(name string) color.Color {
	switch {
	case name == "ours" || name == "fencing" || name == "handoff":
		return colorOurs
	case strings.Contains(name, "PING"), name == "ping", name == "refused", name == "wake", name == "grant+release",
		strings.HasPrefix(name, "txn"), strings.HasPrefix(name, "get"):
		return colorFloor
	}
	return colorPeer
}

// writePlots writes one PNG per store in stores, bench-<store>.png in dir,
// each captioned with run, and returns their paths.
func writePlots(dir string, stores map[string]*storeResults, run string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		f := filepath.Join(dir, "bench-"+name+".png")
		draw := plotStore
		if c := stores[name].contention; len(c) > 0 {
			draw = func(file, _ string, _ *storeResults, run string) error { return plotContention(file, c, run) }
		}
		if err := draw(f, name, stores[name], run); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}

var storeTitles = map[string]string{
	"memory":     "memorybackend vs the original single-mutex design",
	"redis":      "redisbackend vs bsm/redislock, redsync and PING",
	"etcd":       "etcdbackend vs concurrency.Mutex, Txn and Get (embedded etcd)",
	"contention": "one etcd key, N waiters: Lock with and without FIFO vs concurrency.Mutex",
	"sql":        "sqlbackend vs a row lease, pglock's pattern, SELECT 1; flock",
}

// plotStore draws one store's figure: latency at 1 goroutine and the
// handoff on top, throughput against goroutines per operation below.
func plotStore(file, name string, s *storeResults, run string) error {
	const w, h = 11 * vg.Inch, 8.5 * vg.Inch
	img, body := titledCanvas(w, h, 110, fmt.Sprintf("%s: %s (%s)", name, storeTitles[name], run))
	half := (body.Max.Y - body.Min.Y) / 2
	top := draw.Crop(body, 0, 0, half+6, 0)
	bottom := draw.Crop(body, 0, 0, 0, -half-6)

	split := top.Min.X + (top.Max.X-top.Min.X)*0.58
	if len(s.handoff) == 0 { // no handoff table read: the latency takes the row
		split = top.Max.X + 10
	}
	lat := latencyPlot(s.results)
	lat.Draw(draw.Canvas{Canvas: top.Canvas, Rectangle: vg.Rectangle{Min: top.Min, Max: vg.Point{X: split - 10, Y: top.Max.Y}}})
	if len(s.handoff) > 0 {
		hand := handoffPlot(name, s.handoff)
		hand.Draw(draw.Canvas{Canvas: top.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: split + 10, Y: top.Min.Y}, Max: top.Max}})
	}

	tps := throughputPlots(s.results)
	if len(tps) > 0 {
		tiles := draw.Tiles{Rows: 1, Cols: len(tps), PadX: 16}
		for i, p := range tps {
			p.Draw(tiles.At(bottom, i, 0))
		}
	}

	return writePNG(file, img)
}

// titledCanvas returns a white w x h image at dpi with title at its top
// centre, and the canvas under the title, inset by 8 points.
func titledCanvas(w, h vg.Length, dpi int, title string) (*vgimg.Canvas, draw.Canvas) {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	style := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 14), XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	dc.FillText(style, vg.Point{X: w / 2, Y: h - 8}, title)
	return img, draw.Crop(dc, 8, -8, 8, -34)
}

// writePNG writes img to file as a PNG.
func writePNG(file string, img *vgimg.Canvas) error {
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

// latencyPlot is a horizontal bar per contender of every operation run at
// 1 goroutine, grouped under the operation's name, on a log scale.
func latencyPlot(results []result) *plot.Plot {
	var rows []barRow
	lastOp := ""
	for _, r := range results {
		if r.goroutines != 1 {
			continue
		}
		if r.op != lastOp {
			rows = append(rows, barRow{label: r.op + ":", heading: true})
			lastOp = r.op
		}
		rows = append(rows, barRow{label: r.contender, value: r.nsPerOp / 1e3, color: kindColor(r.contender)})
	}
	p := barPlot(rows, "µs per operation (log scale)")
	p.Title.Text = "latency at 1 goroutine"
	for _, k := range []struct {
		name string
		c    color.Color
	}{{"ours", colorOurs}, {"peer", colorPeer}, {"floor", colorFloor}} {
		p.Legend.Add(k.name, swatch{k.c})
	}
	p.Legend.TextStyle.Font.Size = 9
	p.Legend.ThumbnailWidth = 10
	return p
}

// swatch is a legend entry: a square of its color.
type swatch struct{ c color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.c, []vg.Point{c.Min, {X: c.Min.X, Y: c.Max.Y}, c.Max, {X: c.Max.X, Y: c.Min.Y}})
}

// handoffPlot is a horizontal bar per handoff contender, on a log scale.
func handoffPlot(store string, hs []handoff) *plot.Plot {
	var rows []barRow
	for _, x := range hs {
		rows = append(rows, barRow{label: x.name, value: x.us, color: kindColor(x.name)})
	}
	from := "return"
	if store == "memory" {
		from = "call"
	}
	p := barPlot(rows, "µs (log scale), medians")
	p.Title.Text = "handoff, from the release's " + from
	return p
}

// throughputPlots is one plot per operation run at more than one number
// of goroutines: operations per second against goroutines, a line per
// contender.
func throughputPlots(results []result) []*plot.Plot {
	var ops []string
	byOp := map[string]map[string]plotter.XYs{}
	var order = map[string][]string{}
	for _, r := range results {
		if byOp[r.op] == nil {
			byOp[r.op] = map[string]plotter.XYs{}
			ops = append(ops, r.op)
		}
		if byOp[r.op][r.contender] == nil {
			order[r.op] = append(order[r.op], r.contender)
		}
		byOp[r.op][r.contender] = append(byOp[r.op][r.contender], plotter.XY{X: float64(r.goroutines), Y: 1e9 / r.nsPerOp})
	}
	var plots []*plot.Plot
	for _, op := range ops {
		lines := byOp[op]
		if len(lines[order[op][0]]) < 2 {
			continue
		}
		p := plot.New()
		p.Title.Text = op
		p.Title.TextStyle.Font.Size = 10
		p.X.Label.Text = "goroutines"
		p.Y.Label.Text = "operations per second"
		p.X.Scale = plot.LogScale{}
		var ticks plot.ConstantTicks
		for _, xy := range lines[order[op][0]] {
			ticks = append(ticks, plot.Tick{Value: xy.X, Label: strconv.Itoa(int(xy.X))})
		}
		p.X.Tick.Marker = ticks
		p.Y.Tick.Marker = rateTicks{}
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.TextStyle.Font.Size = 8
		peer, floor := 0, 0
		for _, name := range order[op] {
			l, pts, err := plotter.NewLinePoints(lines[name])
			if err != nil {
				continue
			}
			c := kindColor(name)
			switch c {
			case colorOurs:
				l.Width = 2.5
			case colorFloor:
				l.Dashes = [][]vg.Length{{4, 3}, {1.5, 2}}[floor%2]
				floor++
			default:
				c = peerLines[peer%len(peerLines)]
				peer++
			}
			l.Color, pts.Color = c, c
			pts.Shape = draw.CircleGlyph{}
			p.Add(l, pts)
			p.Legend.Add(name, l)
			p.Y.Max = math.Max(p.Y.Max, slices.MaxFunc(lines[name], func(a, b plotter.XY) int { return cmpFloat(a.Y, b.Y) }).Y*1.35)
		}
		p.Add(plotter.NewGrid())
		plots = append(plots, p)
	}
	return plots
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rateTicks labels operations per second as 20k, 1.5M.
type rateTicks struct{}

func (rateTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = formatRate(ticks[i].Value)
			if ticks[i].Value == 0 {
				ticks[i].Label = "0"
			}
		}
	}
	return ticks
}

// logTicks marks a log axis at each multiple of each power of 10 and
// labels 1, 2 and 5 times each power (only the powers over more than two
// decades).
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) { // no log scale: the loop below would never end
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	wide := max/min > 300
	var ticks []plot.Tick
	for p := math.Pow10(int(math.Floor(math.Log10(min)))); p <= max; p *= 10 {
		for i := 1; i < 10; i++ {
			v := float64(i) * p
			if v < min || v > max {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 || !wide && (i == 2 || i == 5) {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// barRow is one row of a bar plot: a bar, or a heading over the bars
// below it.
type barRow struct {
	label   string
	value   float64
	color   color.Color
	heading bool
}

// barPlot is a horizontal bar per row, the first row on top, each bar
// labeled with its value, on a log scale of xLabel.
func barPlot(rows []barRow, xLabel string) *plot.Plot {
	p := plot.New()
	p.X.Label.Text = xLabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	bars := hbars{rows: rows}
	p.Add(bars)
	labels := make([]string, len(rows))
	for i, r := range rows {
		labels[len(rows)-1-i] = r.label
	}
	p.Y.Tick.Label.Font.Size = 9
	p.NominalY(labels...)
	return p
}

// hbars draws barPlot's bars from the left edge of the data area to their
// value, with the value written after each.
type hbars struct{ rows []barRow }

func (b hbars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	const thick = 9
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 8), XAlign: draw.XLeft, YAlign: draw.YCenter, Handler: plot.DefaultTextHandler}
	for i, r := range b.rows {
		if r.heading || r.value <= 0 {
			continue
		}
		y := trY(float64(len(b.rows) - 1 - i))
		x := trX(r.value)
		c.FillPolygon(r.color, []vg.Point{{X: c.Min.X, Y: y - thick/2}, {X: x, Y: y - thick/2}, {X: x, Y: y + thick/2}, {X: c.Min.X, Y: y + thick/2}})
		c.FillText(sty, vg.Point{X: x + 3, Y: y}, formatMicros(r.value))
	}
}

// DataRange spans the values from a little below the least to well above
// the largest (room for the value's label).
func (b hbars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	for _, r := range b.rows {
		if !r.heading && r.value > 0 {
			xmin, xmax = math.Min(xmin, r.value), math.Max(xmax, r.value)
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 1, 10
	}
	return xmin / 2, xmax * 4, -0.5, float64(len(b.rows)) - 0.5
}

// formatMicros writes a duration in µs as ns, µs or ms.
func formatMicros(us float64) string {
	switch {
	case us < 1:
		return fmt.Sprintf("%.0f ns", us*1e3)
	case us < 1000:
		return fmt.Sprintf("%.3g µs", us)
	}
	return fmt.Sprintf("%.3g ms", us/1e3)
}
