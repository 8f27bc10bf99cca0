package bench

import (
	"fmt"
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// contentionRow is one row of the contention handoff's table
// (contentionSection): a contender at a number of waiters.
type contentionRow struct {
	waiters         int
	contender       string
	median, p90     float64 // µs from the release's call
	wokenPerRelease float64 // grant attempts woken by a release
}

// readContentionRow reads a row of the contention table, whose columns are
// waiters, contender, handoffs, median and p90 from the release's call,
// median and p90 from its return, the ratio, and grant attempts woken by a
// release, then more.
func readContentionRow(row []string) (contentionRow, error) {
	if len(row) < 9 {
		return contentionRow{}, fmt.Errorf("%d cells, want at least 9", len(row))
	}
	n, err := strconv.Atoi(row[0])
	if err != nil {
		return contentionRow{}, err
	}
	var v [3]float64
	for i, col := range []int{3, 4, 8} {
		if v[i], err = strconv.ParseFloat(row[col], 64); err != nil {
			return contentionRow{}, err
		}
	}
	return contentionRow{n, row[1], v[0], v[1], v[2]}, nil
}

// contentionColor is a contention contender's color: FIFO ours, the Lock
// without FIFO a paler blue, the Mutex the peer's.
func contentionColor(name string) color.Color {
	switch name {
	case "Lock, WithFIFO":
		return colorOurs
	case "Lock":
		return color.RGBA{R: 0x8c, G: 0xb8, B: 0xe6, A: 0xff}
	}
	return colorPeer
}

// plotContention draws the contention handoff: the handoff's median and
// p90 against the number of waiters, and the grant attempts a release
// wakes, a line per contender.
func plotContention(file string, rows []contentionRow, run string) error {
	const w, h = 11 * vg.Inch, 5 * vg.Inch
	img, body := titledCanvas(w, h, 110, fmt.Sprintf("contention: %s (%s)", storeTitles["contention"], run))

	var names []string
	byName := map[string][]contentionRow{}
	for _, r := range rows {
		if byName[r.contender] == nil {
			names = append(names, r.contender)
		}
		byName[r.contender] = append(byName[r.contender], r)
	}
	newPlot := func(title, yLabel string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.Title.TextStyle.Font.Size = 10
		p.X.Label.Text = "waiters"
		p.X.Scale = plot.LogScale{}
		var ticks plot.ConstantTicks
		for _, r := range byName[names[0]] {
			ticks = append(ticks, plot.Tick{Value: float64(r.waiters), Label: strconv.Itoa(r.waiters)})
		}
		p.X.Tick.Marker = ticks
		p.Y.Label.Text = yLabel
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.TextStyle.Font.Size = 8
		p.Add(plotter.NewGrid())
		return p
	}
	line := func(p *plot.Plot, name, label string, xys plotter.XYs, dashed bool) error {
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c := contentionColor(name)
		l.Color, pts.Color, pts.Shape = c, c, draw.CircleGlyph{}
		l.Width = 2
		if dashed {
			l.Dashes = []vg.Length{4, 3}
			l.Width = 1
		}
		p.Add(l, pts)
		p.Legend.Add(label, l)
		return nil
	}
	lat := newPlot("handoff, from the release's call", "µs (log scale)")
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = logTicks{}
	woken := newPlot("grant attempts woken by a release", "attempts per handoff")
	woken.Y.Min = 0
	for _, name := range names {
		var med, p90, att plotter.XYs
		for _, r := range byName[name] {
			x := float64(r.waiters)
			med = append(med, plotter.XY{X: x, Y: r.median})
			p90 = append(p90, plotter.XY{X: x, Y: r.p90})
			att = append(att, plotter.XY{X: x, Y: r.wokenPerRelease})
			woken.Y.Max = max(woken.Y.Max, r.wokenPerRelease*1.2)
		}
		if err := line(lat, name, name+", median", med, false); err != nil {
			return err
		}
		if err := line(lat, name, name+", p90", p90, true); err != nil {
			return err
		}
		if err := line(woken, name, name, att, false); err != nil {
			return err
		}
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 24}
	lat.Draw(tiles.At(body, 0, 0))
	woken.Draw(tiles.At(body, 1, 0))
	return writePNG(file, img)
}
