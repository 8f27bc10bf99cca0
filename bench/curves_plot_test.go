package bench

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// TestCurvesPlot draws the curves from the CSV files of a run of
// TestCurves: those in CURVES_OUT, or the run docs/scale.md prints
// (testdata/curves), into CURVES_PLOTS (default a temporary directory,
// which checks that the files still read). The committed plots are made
// with
//
//	cd bench && CURVES_PLOTS=../docs/img go test -run '^TestCurvesPlot$' -count=1 .
func TestCurvesPlot(t *testing.T) {
	from := envString("CURVES_OUT", filepath.Join("testdata", "curves"))
	dir := os.Getenv("CURVES_PLOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	caption := envString("CURVES_CAPTION", "")
	if b, err := os.ReadFile(filepath.Join(from, "caption.txt")); err == nil && caption == "" {
		caption = strings.TrimSpace(string(b))
	}
	for _, curve := range []string{"keys", "waiters"} {
		files, err := filepath.Glob(filepath.Join(from, curve+"-*.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Logf("no %s-*.csv in %s", curve, from)
			continue
		}
		var rows []map[string]string
		for _, f := range files {
			r, err := readCurveCSV(f)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r...)
		}
		out := filepath.Join(dir, "curves-"+curve+".png")
		draw := plotKeys
		if curve == "waiters" {
			draw = plotWaiters
		}
		if err := draw(out, rows, caption); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		t.Logf("wrote %s", out)
	}
}

// readCurveCSV reads a CSV file of TestCurves, a map per row by column.
func readCurveCSV(path string) ([]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) < 1 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	var rows []map[string]string
	for _, rec := range recs[1:] {
		m := map[string]string{}
		for i, col := range recs[0] {
			if i < len(rec) {
				m[col] = rec[i]
			}
		}
		rows = append(rows, m)
	}
	return rows, nil
}

// curveBackends are the backends in the order and colour the plots
// draw them.
var curveBackends = []struct {
	name string
	c    color.Color
}{
	{"memory", colorFloor},
	{"sqlite", color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}},
	{"postgres", colorOurs},
	{"mariadb", color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}},
	{"redis", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}},
	{"etcd", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}},
	{"kube", color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}},
}

// curvePanel is one panel: y against x, a line per backend (and per
// variant, when split names a column that tells them apart).
type curvePanel struct {
	title, xLabel, yLabel string
	x, y                  string
	logY                  bool
	split                 string  // a column whose values get a line each ("fifo")
	hline                 float64 // a horizontal line (0: none)
	filter                func(map[string]string) bool
}

func drawCurvePanels(file, title string, rows []map[string]string, panels []curvePanel) error {
	const w, h = 12 * vg.Inch, 8 * vg.Inch
	img, body := titledCanvas(w, h, 100, title)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: 20, PadY: 20}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text, p.Y.Label.Text = pn.xLabel, pn.yLabel
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
		if pn.logY {
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
		}
		p.Add(plotter.NewGrid())
		for _, b := range curveBackends {
			variants := []string{""}
			if pn.split != "" {
				variants = []string{"false", "true"}
			}
			for vi, v := range variants {
				var xys plotter.XYs
				for _, r := range rows {
					if r["backend"] != b.name || (pn.split != "" && r[pn.split] != v) || (pn.filter != nil && !pn.filter(r)) {
						continue
					}
					x, err1 := strconv.ParseFloat(r[pn.x], 64)
					y, err2 := strconv.ParseFloat(r[pn.y], 64)
					if err1 != nil || err2 != nil || (pn.logY && y <= 0) {
						continue
					}
					xys = append(xys, plotter.XY{X: x, Y: y})
				}
				if len(xys) == 0 {
					continue
				}
				slices.SortFunc(xys, func(a, b plotter.XY) int { return cmpFloat(a.X, b.X) })
				l, s, err := plotter.NewLinePoints(xys)
				if err != nil {
					return err
				}
				l.Color, l.Width, s.Color = b.c, 2, b.c
				label := b.name
				if vi == 1 {
					l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
					label += " FIFO"
				}
				p.Add(l, s)
				if i == 0 {
					p.Legend.Add(label, l, s)
				}
			}
		}
		if pn.hline > 0 {
			l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: pn.hline}, {X: p.X.Max, Y: pn.hline}})
			if err != nil {
				return err
			}
			l.Color, l.Dashes = colorFloor, []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(l)
		}
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.TextStyle.Font.Size = 9
		p.Draw(tiles.At(body, i%2, i/2))
	}
	return writePNG(file, img)
}

func plotKeys(file string, rows []map[string]string, caption string) error {
	return drawCurvePanels(file, "Grant+Release on random idle keys as the store grows ("+caption+")", rows, []curvePanel{
		{title: "p50 (µs)", xLabel: "keys in the store", yLabel: "µs", x: "keys", y: "p50_us", logY: true},
		{title: "p50 / p50 of a 1000-key store, interleaved", xLabel: "keys in the store", yLabel: "ratio", x: "keys", y: "ratio_p50", hline: 1.2,
			filter: func(r map[string]string) bool { return r["backend"] != "memory" }},
		{title: "p99 (µs)", xLabel: "keys in the store", yLabel: "µs", x: "keys", y: "p99_us", logY: true},
		{title: "store bytes per key", xLabel: "keys in the store", yLabel: "bytes", x: "keys", y: "bytes_per_key", logY: true},
	})
}

func plotWaiters(file string, rows []map[string]string, caption string) error {
	// A count of waiters with no handoff in the window has no handoff
	// latency, and its requests are not per handoff: only the count of
	// handoffs shows it.
	handed := func(r map[string]string) bool { return r["handoffs"] != "0" }
	return drawCurvePanels(file, "N waiters on one key: each handoff, without and with WithFIFO ("+caption+")", rows, []curvePanel{
		{title: "handoff p50 (µs)", xLabel: "waiters", yLabel: "µs", x: "waiters", y: "p50_us", logY: true, split: "fifo", filter: handed},
		{title: "store requests per handoff", xLabel: "waiters", yLabel: "requests", x: "waiters", y: "requests_per_handoff", logY: true, split: "fifo", filter: handed},
		{title: "handoff p99 (µs)", xLabel: "waiters", yLabel: "µs", x: "waiters", y: "p99_us", logY: true, split: "fifo", filter: handed},
		{title: "handoffs in the window (none: no point)", xLabel: "waiters", yLabel: "handoffs", x: "waiters", y: "handoffs", logY: true, split: "fifo"},
	})
}
